"""Where models come from: the packaged model, the published ones and their downloads, this
library's checkpoint files, and the one resolver that turns any model source into a model
(:func:`load_model`, :func:`load_language_model`)."""

from elmo.hub.checkpoints import read_checkpoint
from elmo.hub.resolve import (
    Location,
    ModelSource,
    load_language_model,
    load_language_model_with_origin,
    load_model,
    load_model_with_origin,
    locate,
)

__all__ = ["Location", "ModelSource", "load_language_model", "load_language_model_with_origin", "load_model",
           "load_model_with_origin", "locate", "read_checkpoint"]
