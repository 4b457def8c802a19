"""Store a model folder's warm state beside its weights (``warm_state.npz``), so that the first
``elmo embed`` with it skips the warm-up run: the packaged model ships one.

    python experiments/write_warm_state.py src/elmo/resources/model
"""

from __future__ import annotations

import argparse
import os
import sys

from elmo.hub import load_model
from elmo.inference.runtime import Runtime, compute_warm_state, warm_state_key
from elmo.inference.states import WARM_STATE_FILE, save_warm_state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="folder with options.json and weights.hdf5")
    args = parser.parse_args(argv)
    runtime = Runtime(load_model(args.model), state="reset")  # float32 on the CPU, as embed's default
    save_warm_state(compute_warm_state(runtime), warm_state_key(runtime), os.path.join(args.model, WARM_STATE_FILE))
    print(f"wrote {os.path.join(args.model, WARM_STATE_FILE)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
