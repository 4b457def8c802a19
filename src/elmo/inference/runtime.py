"""The inference runtime: one object that runs a biLM fast for inference, created once per model.

:class:`~elmo.model.network.BiLM` is the specification (the per-timestep reference); its training
paths are :mod:`elmo.kernels.dispatch`'s.
:class:`Runtime` holds everything that only inference needs, so that no caller reaches into the
model: the device and the precision of the matrix products, both directions' weights stacked for
batched products, the token memo and the vocabulary cache, and the LSTM state policy. It never
changes the model it is given: a model on another device is copied, and nothing is set on it.
:class:`~elmo.inference.embed.Embedder`, :class:`~elmo.inference.elmo.Elmo` and the task layer cache all run through it.
"""

from __future__ import annotations

import copy
import hashlib
import os
import warnings
from collections.abc import Sequence

import torch

from elmo.devices import resolve_device
from elmo.hub.pretrained import packaged_model_dir
from elmo.inference.graphs import LstmGraphs
from elmo.inference.precision import (
    DEFAULT_PRECISION,
    PRECISIONS,
    effective_precision,
)
from elmo.inference.states import (
    DEFAULT_STATE,
    WARM_STATE_FILE,
    WARM_STATE_VERSION,
    StateKeeper,
    load_warm_state,
    save_warm_state,
    warm_state_cache_path,
    warmup_sentences,
    warmup_text,
)
from elmo.kernels.cpu_lstm import StackedWeights, bilstm_inference, stack_directions
from elmo.kernels.dispatch import bilm_forward
from elmo.kernels.encoder import encode_fast, encode_words_fast
from elmo.model.network import BiLM, BiLMOutput, BiLMState, add_boundaries, remove_boundaries, reverse_within_length
from elmo.model.weights import weights_fingerprint

# Keys of the sentence markers in the token memo: not strings, so that no input token (a literal
# "<S>", or "<bos>" for a dictionary model) can stand for them.
BOS_KEY, EOS_KEY = ("sentence marker", "begin"), ("sentence marker", "end")

# Token vectors remembered between batches (0: none).
DEFAULT_TOKEN_MEMO = 100_000


class Runtime:
    """Fast, exact inference over one biLM.

    ``precision`` is the dtype of the matrix products (``"float32"``, ``"bfloat16"``,
    ``"float16"``, ``"int8"``: :data:`~elmo.inference.precision.PRECISIONS`; :attr:`dtype` holds
    it as a ``torch.dtype``); ``state`` the LSTM state policy (:mod:`elmo.inference.states`); ``vocab_cache`` a file
    from ``elmo cache-vocab``; ``token_memo`` how many token vectors to remember between batches.
    A model whose ``fast`` flag is off runs its reference path instead (the specification).
    ``cuda_graphs`` (CUDA only) replays the LSTM's steps from CUDA graphs for batch shapes that
    repeat (:mod:`elmo.inference.graphs`); the same numbers to the rounding of the products.

    The modules that run through a runtime use only its public names, and nothing that starts
    with ``_`` (``tests/test_runtime_interface.py`` holds every module of the package to that):

    * what it runs: :attr:`model` (read, never changed), :attr:`config`, :attr:`device`,
      :attr:`precision` and :attr:`dtype`, :attr:`state` (the policy's name);
    * running batches: :meth:`run_batch` (token lists), :meth:`step` (character ids, under the
      state policy), :meth:`forward` (from a given state, the policy untouched);
    * the state policy: :meth:`initial_state`, :meth:`zero_state`, :meth:`reset_state`, and
      :attr:`carried_state`, the state a stateful run hands on, to save and restore;
    * what the vectors depend on: :meth:`weights_fingerprint`, :meth:`vocab_cache_fingerprint`;
    * the pieces of the fast path a caller that runs its own loop needs (a sentence in windows,
      :mod:`elmo.inference.long_lines`): :meth:`token_vectors` and :meth:`lstm_layer`.

    :attr:`states` (the :class:`~elmo.inference.states.StateKeeper`) and :attr:`graphs` stay
    public for the benchmarks and tests that look inside them.
    """

    def __init__(self, model: BiLM, *, device: str | torch.device | None = None, precision: str = DEFAULT_PRECISION,
                 state: str = DEFAULT_STATE, vocab_cache: str | os.PathLike | None = None,
                 token_memo: int = DEFAULT_TOKEN_MEMO, cuda_graphs: bool = False):
        if precision not in PRECISIONS:
            raise ValueError(f"precision: expected one of {sorted(PRECISIONS)}, got {precision!r}")
        if token_memo < 0:
            raise ValueError(f"token_memo: must not be negative, got {token_memo}")
        current = next(model.parameters()).device
        self.device = resolve_device(device, current)
        if cuda_graphs and self.device.type != "cuda":
            raise ValueError(f"cuda_graphs: CUDA graphs need a CUDA device; this runtime runs on {self.device}")
        # The caller's model stays where it is: a model on another device is copied, not moved.
        self.model = model if self.device == current else copy.deepcopy(model).to(self.device)
        precision = effective_precision(precision, self.device, self.model.config)
        self.dtype = PRECISIONS[precision]  # the products' (torch.int8: on float32 rows)
        self.precision = precision
        self._stacked: dict[int, tuple[tuple, StackedWeights]] = {}
        self._fingerprint: tuple[tuple, str] | None = None
        # Token vectors never depend on context: a word seen in an earlier batch is looked up,
        # not encoded again. Bounded, and dropped whenever the encoder's weights change.
        self.token_memo_size = token_memo
        self._memo: dict[str, torch.Tensor] = {}
        self._memo_key: tuple | None = None
        # Token vectors of ``elmo cache-vocab``'s file, looked up before the memo.
        self._vocab: dict[str, torch.Tensor] = {}
        if vocab_cache is not None:
            from elmo.inference.vocab_cache import load_vocab_cache

            self._vocab = {w: v.to(self.device) for w, v in load_vocab_cache(vocab_cache, self.model).items()}
        self.graphs: LstmGraphs | None = None
        if cuda_graphs:
            model = self.model
            self.graphs = LstmGraphs(list(zip(model.forward_layers, model.backward_layers)), self.dtype,
                                     model.config.lstm.use_skip_connections)
        self.states = StateKeeper(state)

    @property
    def config(self):
        """The model's :class:`~elmo.model.config.BiLMConfig` (its sizes: ``config.lstm.n_layers``,
        ``config.lstm.projection_dim``, ...)."""
        return self.model.config

    @property
    def state(self) -> str:
        """The state policy's name: ``"warm"``, ``"reset"`` or ``"stateful"``."""
        return self.states.mode

    def zero_state(self, batch: int) -> BiLMState:
        """Zeros for ``batch`` rows: ``c`` ``(2, L, batch, dim)``, ``h`` ``(2, L, batch, projection_dim)``."""
        return self.model.zero_state(batch)

    # ------------------------------------------------------------------------------ running
    @torch.no_grad()  # not inference_mode: Elmo's mixes take these layers into autograd
    def forward(self, char_ids: torch.Tensor, mask: torch.Tensor, state: BiLMState | None = None,
                keep_boundaries: bool = False, words: Sequence[Sequence[str]] | None = None) -> BiLMOutput:
        """The biLM's layers for ``char_ids`` ``(batch, time, 50)`` and ``mask`` ``(batch, time)``
        from ``state`` (None: zeros), exactly as :meth:`BiLM.forward` computes them (to float
        rounding in float32). ``words``, the token lists behind ``char_ids``, lets the token memo and
        the vocabulary cache stand in for the character CNN."""
        char_ids, mask = char_ids.to(self.device), mask.to(self.device)
        if state is not None:
            state = BiLMState(state.c.to(self.device), state.h.to(self.device))
        if not self.model.fast:
            return self.model(char_ids, mask, state, keep_boundaries=keep_boundaries)
        tokens = None
        if words is not None and (self._vocab or self.token_memo_size > 0):
            tokens = self._token_vectors(list(words), char_ids)
        return self._forward_fast(char_ids, mask, state, keep_boundaries, tokens)

    __call__ = forward

    def initial_state(self, batch: int) -> BiLMState | None:
        """The state policy's initial state for a batch of ``batch`` rows (None: zeros); in warm
        mode the warm state is computed (or read from disk) here, once."""
        if self.states.needs_warm:
            self.states.warm = load_or_compute_warm_state(self)
        return self.states.initial(batch)

    def step(self, char_ids: torch.Tensor, mask: torch.Tensor, *, words: Sequence[Sequence[str]] | None = None,
             keep_boundaries: bool = False, differentiable: bool = False) -> BiLMOutput:
        """One batch under the state policy: its initial state in, the biLM's layers out, the
        state it carries to the next batch updated. Every caller that runs batches (the
        :class:`~elmo.inference.embed.Embedder`, :class:`~elmo.inference.elmo.Elmo`,
        :class:`elmo.allennlp.Elmo`) goes through here.

        ``char_ids`` ``(batch, time, 50)``, ``mask`` ``(batch, time)``; ``words`` as in
        :meth:`forward`. ``differentiable`` runs the biLM under autograd through its LSTM path
        (:func:`elmo.kernels.dispatch.bilm_forward`), so that gradients reach its weights (a biLM
        being fine-tuned), instead of the inference path."""
        initial = self.initial_state(char_ids.shape[0])
        if differentiable:
            char_ids, mask = char_ids.to(self.device), mask.to(self.device)
            out = bilm_forward(self.model, char_ids, mask, initial, keep_boundaries=keep_boundaries)
        else:
            out = self.forward(char_ids, mask, initial, keep_boundaries=keep_boundaries, words=words)
        self.states.update(out.state)
        return out

    def run_batch(self, rows: Sequence[Sequence[str]]) -> BiLMOutput:
        """One batch of token lists through :meth:`step`: the one batch path of the
        :class:`~elmo.inference.embed.Embedder` (and so of files and the server). Returns the
        biLM's layers ``(batch, L+1, time, 2*projection_dim)`` without the sentence boundaries
        (``time``: the longest row; zero past a row's end), the ``mask`` ``(batch, time)`` and the
        final state."""
        rows = [list(r) for r in rows]
        ids, mask = self.model.characters.batch(rows)
        return self.step(ids, mask, words=rows)

    def reset_state(self) -> None:
        """Forget the state carried between calls (stateful mode) and the warm state."""
        self.states.reset()

    @property
    def carried_state(self) -> BiLMState | None:
        """The state each row of the last batch hands to the same row of the next one (stateful
        mode): ``c`` ``(2, L, rows, dim)``, ``h`` ``(2, L, rows, projection_dim)``, ``rows`` the
        largest batch run so far; None when nothing is carried (before the first batch, after
        :meth:`reset_state`, and always under the warm and reset policies)."""
        return self.states.carried

    @carried_state.setter
    def carried_state(self, state: BiLMState | None) -> None:
        """Continue from a state saved earlier (stateful mode only; None forgets it), e.g. the one
        a resumed file's journal stored; it is moved to this runtime's device."""
        if state is not None:
            state = BiLMState(state.c.to(self.device), state.h.to(self.device))
        self.states.carried = state

    def weights_fingerprint(self) -> str:
        """:func:`~elmo.model.weights.weights_fingerprint` of the model, hashed again only when a
        parameter or buffer changed (a tensor's ``_version`` grows with every in-place update, as
        for the stacked weights): hashing the original size's 374 MB takes 0.3 s, and one ``elmo
        embed`` asks twice (its journal's fingerprint and its warm state's key)."""
        key = tuple((name, id(t), t._version) for name, t in self.model.state_dict(keep_vars=True).items())
        if self._fingerprint is None or self._fingerprint[0] != key:
            self._fingerprint = (key, weights_fingerprint(self.model))
        return self._fingerprint[1]

    def vocab_cache_fingerprint(self) -> str | None:
        """SHA-256 of the vocabulary cache (its words and vectors, in word order), or None when
        the runtime has none: with :meth:`weights_fingerprint`, what the token vectors depend on
        (a file's run records it, so that a resumed run uses the same cache)."""
        if not self._vocab:
            return None
        digest = hashlib.sha256()
        for word in sorted(self._vocab):
            digest.update(word.encode("utf-8", "surrogatepass") + b"\0")
            digest.update(self._vocab[word].float().cpu().numpy().tobytes())
        return digest.hexdigest()

    # ------------------------------------------------------------------ pieces of the fast path
    @torch.no_grad()  # as forward: the same kernels (with gradients wanted, blocks.linear takes others)
    def token_vectors(self, words: Sequence[str]) -> torch.Tensor:
        """The context-independent token vectors of ``words`` (one sentence, or a window of one),
        ``(len(words), projection_dim)``: looked up in the vocabulary cache and the token memo,
        the others encoded by the character CNN (and remembered), as :meth:`forward` does. No
        sentence boundary is added: ``words`` may hold ``<S>`` and ``</S>`` themselves."""
        placeholder = torch.empty(1, len(words), 0)  # only its shape is read
        return self._token_vectors([list(words)], placeholder)[0, 1:-1]

    def lstm_layer(self, index: int, x: torch.Tensor, lengths: torch.Tensor, c: torch.Tensor,
                   h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Layer ``index`` of both LSTM stacks at once, in this runtime's precision, as
        :meth:`forward` runs it: ``x`` ``(2, batch, time, input_dim)`` (index 0 in the forward
        reading order, 1 in the backward one), rows sorted by ``lengths`` ``(batch,)``, longest
        first; from ``c`` ``(2, batch, dim)`` and ``h`` ``(2, batch, projection_dim)``. Returns the
        outputs ``(2, batch, time, projection_dim)`` (before any skip connection, which is the
        caller's: ``config.lstm.use_skip_connections``) and the final ``(c, h)``
        (:func:`~elmo.kernels.cpu_lstm.bilstm_inference`)."""
        return bilstm_inference(self.model.forward_layers[index], self.model.backward_layers[index], x, lengths,
                                c, h, self.dtype, self._stacked_weights(index))

    # ---------------------------------------------------------------------------- internals
    def _stacked_weights(self, index: int) -> StackedWeights:
        """Layer ``index``'s weights as :func:`~elmo.kernels.cpu_lstm.stack_directions` lays them out,
        rebuilt only when a parameter changed (a tensor's ``_version`` grows with every in-place
        update): stacking them on every call cost 35% of the time of embedding one sentence."""
        layers = (self.model.forward_layers[index], self.model.backward_layers[index])
        key = tuple((id(p), p._version) for layer in layers for p in layer.parameters())
        cached = self._stacked.get(index)
        if cached is None or cached[0] != key:
            cached = (key, stack_directions(*layers, self.dtype))
            self._stacked[index] = cached
        return cached[1]

    def _memo_for_current_weights(self) -> dict[str, torch.Tensor]:
        key = tuple((id(p), p._version) for p in self.model.token_encoder.parameters())
        if key != self._memo_key or len(self._memo) > self.token_memo_size:
            self._memo, self._memo_key = {}, key
        return self._memo

    def _token_vectors(self, rows: list[list[str]], ids: torch.Tensor) -> torch.Tensor:
        """Token vectors ``(batch, time+2, dim)`` with boundaries: words in the vocabulary cache
        or the memo are looked up, the others encoded once each (and remembered)."""
        memo = self._memo_for_current_weights() if self.token_memo_size > 0 else {}
        found, missing = {}, {}
        for sentence in rows:
            for word in (BOS_KEY, *sentence, EOS_KEY):
                if word in found or word in missing:
                    continue
                vector = self._vocab.get(word)
                if vector is None:
                    vector = memo.get(word)
                if vector is None:
                    missing[word] = len(missing)
                else:
                    found[word] = vector
        if missing:
            words = list(missing)
            characters = self.model.characters
            marker_ids = {BOS_KEY: characters.bos_ids, EOS_KEY: characters.eos_ids}
            texts = [w for w in words if w not in marker_ids]
            by_word = dict(zip(texts, characters.batch([[w] for w in texts])[0][:, 0])) if texts else {}
            rows_ids = torch.stack([torch.as_tensor(marker_ids[w]) if w in marker_ids else by_word[w] for w in words])
            vectors = encode_words_fast(self.model.token_encoder, rows_ids.to(self.device), self.dtype)
            for word, vector in zip(words, vectors):
                found[word] = vector
                if self.token_memo_size > 0:
                    memo[word] = vector
        table = torch.stack(list(found.values()))  # (n_words, dim)
        index = {word: i for i, word in enumerate(found)}
        positions = torch.zeros(ids.shape[0], ids.shape[1] + 2, dtype=torch.long)
        keep = torch.zeros(ids.shape[0], ids.shape[1] + 2, 1)
        for i, sentence in enumerate(rows):
            row = [index[BOS_KEY], *(index[w] for w in sentence), index[EOS_KEY]]
            positions[i, :len(row)] = torch.tensor(row)
            keep[i, :len(row)] = 1.0
        return table[positions.to(self.device)] * keep.to(self.device)

    def _forward_fast(self, char_ids: torch.Tensor, mask: torch.Tensor, state: BiLMState | None,
                      keep_boundaries: bool, tokens: torch.Tensor | None) -> BiLMOutput:
        """The token encoder once per distinct word and never on padding, both directions
        advanced together, no step computed for a finished sentence."""
        model = self.model
        batch = char_ids.shape[0]
        ids, full_mask = add_boundaries(char_ids, mask, model.characters.bos_ids, model.characters.eos_ids)
        if tokens is None:
            tokens = encode_fast(model.token_encoder, ids, full_mask, self.dtype)
        if state is None:
            state = model.zero_state(batch)
        lengths = full_mask.sum(dim=1)
        # Longest first, so that the rows still running at any step are a prefix of the batch.
        order = torch.argsort(lengths, descending=True, stable=True)
        restore = torch.argsort(order)
        tokens, sorted_mask, lengths = tokens[order], full_mask[order], lengths[order]
        c, h = state.c[:, :, order], state.h[:, :, order]

        x = torch.stack([tokens, reverse_within_length(tokens, sorted_mask)])  # (2, batch, time+2, proj)
        weights = [self._stacked_weights(index) for index in range(model.n_layers)]
        graphed = self.graphs.run(x, lengths, c, h, weights) if self.graphs is not None else None
        if graphed is not None:
            outputs, final_c, final_h = graphed
        else:
            outputs, final_c, final_h = self._lstm_eager(x, lengths, c, h, weights)
        layers = [torch.cat([tokens, tokens], dim=-1)]
        layers += [torch.cat([out[0], reverse_within_length(out[1], sorted_mask)], dim=-1) for out in outputs]
        stacked = torch.stack(layers, dim=1)[restore]  # (batch, L+1, time+2, 2*proj)
        new_state = BiLMState(final_c[:, :, restore], final_h[:, :, restore])
        if keep_boundaries:
            return BiLMOutput(stacked, full_mask, new_state)
        stacked, out_mask = remove_boundaries(stacked, full_mask)
        return BiLMOutput(stacked, out_mask, new_state)

    def _lstm_eager(self, x: torch.Tensor, lengths: torch.Tensor, c: torch.Tensor, h: torch.Tensor,
                    weights: list[StackedWeights]) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """Every layer over ``x`` ``(2, batch, time, proj)`` (rows sorted longest first) from
        ``c`` ``(2, L, batch, dim)`` and ``h``: each layer's outputs ``(2, batch, time, proj)``
        (residual included) and the final ``(c, h)`` ``(2, L, batch, ...)``."""
        model = self.model
        outputs, final_c, final_h = [], [], []
        for index, (forward_layer, backward_layer) in enumerate(zip(model.forward_layers, model.backward_layers)):
            out, c_l, h_l = bilstm_inference(forward_layer, backward_layer, x, lengths, c[:, index], h[:, index],
                                             self.dtype, weights[index])
            if index > 0 and model.config.lstm.use_skip_connections:
                out = out + x
            outputs.append(out)
            final_c.append(c_l)
            final_h.append(h_l)
            x = out
        return outputs, torch.stack(final_c, dim=1), torch.stack(final_h, dim=1)


# ------------------------------------------------------------------------------ the warm state
@torch.inference_mode()
def compute_warm_state(model: BiLM | Runtime, sentences: list[list[str]] | None = None) -> BiLMState:
    """Read ``sentences`` (default: the warm-up text) as one running stream, starting from zero,
    and average the state reached after each sentence. Returns a one-row state.

    ``model`` is a runtime (its device and precision are used) or a biLM (run in float32)."""
    runtime = model if isinstance(model, Runtime) else Runtime(model, state="reset")
    sentences = sentences if sentences is not None else warmup_sentences()
    state = runtime.zero_state(1)
    total_c, total_h = torch.zeros_like(state.c), torch.zeros_like(state.h)
    for sentence in sentences:
        ids, mask = runtime.model.characters.batch([sentence])
        state = runtime.forward(ids, mask, state).state
        total_c += state.c
        total_h += state.h
    return BiLMState(total_c / len(sentences), total_h / len(sentences))


def warm_state_key(runtime: Runtime) -> str:
    """What a warm state depends on: the weights (their fingerprint), the warm-up text, the
    precision and the kind of device it is computed in, and the procedure's version."""
    parts = [runtime.weights_fingerprint(), hashlib.sha256(warmup_text()).hexdigest(), runtime.precision,
             runtime.device.type, str(WARM_STATE_VERSION)]
    if runtime.model.characters.fingerprint():  # a dictionary model: its dictionaries decide its tokens too
        parts.append(runtime.model.characters.fingerprint())
    return hashlib.sha256(":".join(parts).encode()).hexdigest()


def load_or_compute_warm_state(runtime: Runtime) -> BiLMState:
    """The warm state of the runtime's model, computed once per model and kept on disk.

    Looked up first beside the packaged model (its ``warm_state.npz``, shipped with it), then in
    ``$ELMO_CACHE/warm-states/<key>.npz``; otherwise computed (running the warm-up text, most of
    the start-up time of a one-sentence ``elmo embed``) and saved there. The key is
    :func:`warm_state_key`, so a changed model, text, precision or procedure never reads a stale
    state. A stored state is the computed one, bit for bit; computing it again under another
    thread count or CPU can differ in the last bits (up to ~3e-6), as any float32 product does."""
    key = warm_state_key(runtime)
    expected = runtime.zero_state(1)
    for path in (packaged_model_dir() / WARM_STATE_FILE, warm_state_cache_path(key)):
        state = load_warm_state(path, key)
        if state is not None and state.c.shape == expected.c.shape and state.h.shape == expected.h.shape:
            return BiLMState(state.c.to(runtime.device), state.h.to(runtime.device))
    state = compute_warm_state(runtime)
    try:
        save_warm_state(state, key, warm_state_cache_path(key), make_parents=True)
    except OSError as e:  # a read-only home costs the next run its start-up time, nothing else
        warnings.warn(f"could not keep the warm state in {warm_state_cache_path(key)}: {e}", stacklevel=2)
    return state


__all__ = ["DEFAULT_PRECISION", "DEFAULT_TOKEN_MEMO", "PRECISIONS", "Runtime", "compute_warm_state",
           "load_or_compute_warm_state", "resolve_device", "warm_state_key"]
