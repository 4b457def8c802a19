"""What each biLM layer captures (the paper's section 5.3): one command per analysis, each writing
a Markdown table and a plot of score per layer into docs/probes/.

    python experiments/probes.py wsd --semcor ../shared/data/wsd/semcor3.0_tokens.tsv.gz \
        --eval ../shared/data/wsd/raganato-eval/ALL/ALL.data.xml

    python experiments/probes.py pos

``pos`` (Table 6): a linear softmax layer on each biLM layer's frozen vectors (and on GloVe
vectors of the same words) predicts each token's part of speech: Penn tags on NLTK's PTB WSJ
sample (split by file, see ``elmo.tasks.tagging.PTB_SAMPLE_SPLITS``) and UPOS on UD
English-EWT (its official splits). Test accuracy per layer.

    python experiments/probes.py neighbours

``neighbours`` (Table 4): the SemCor sentences whose use of "play" is nearest to its use in the
paper's two query sentences (a baseball play, a Broadway play), at each LSTM layer, against
GloVe's context-free nearest words to "play".

``wsd`` (Table 5): sense centroids from SemCor 3.0 at every layer, nearest centroid for each
instance of the unified evaluation framework (Senseval-2/3, SemEval-2007/13/15 and ALL, split
from ALL by instance id), WordNet's first sense where SemCor has none of a lemma's senses; the
first-sense baseline beside it. ``--bilm`` picks the biLM (default: the packaged model).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

import numpy as np

from elmo.fileio import read_lines

# probes_lib/ (the WSD method and the linear probes) lives beside this script.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The paper's numbers (Peters et al. 2018, Table 5; F1 on ALL).
PAPER_WSD = {"first sense": 65.9, "layer 1": 67.4, "layer 2": 69.0}
PAPER_POS = {"layer 1": 97.3, "layer 2": 96.8}  # PTB WSJ, Table 6
SETS = ["senseval2", "senseval3", "semeval2007", "semeval2013", "semeval2015", "ALL"]


def shown_command(script: str, arguments: list[str]) -> str:
    """The command line as a page shows it: a path under the folder in $RUNS (experiments/all_tables.sh
    exports it) starts with ``$RUNS``, so that no committed page names one machine's folders."""
    runs = os.environ.get("RUNS", "").rstrip("/")
    shown = [("$RUNS" + a[len(runs):]) if runs and (a == runs or a.startswith(runs + "/")) else a for a in arguments]
    return " ".join([f"python {script}", *shown])


def wsd(args) -> None:
    from probes_lib.wsd import (
        WordNetSenses,
        annotated_token_vectors,
        disambiguate,
        first_sense_predictions,
        read_raganato,
        read_semcor,
        sense_centroids,
        wsd_scores,
    )

    from elmo.fileio import atomic_write_text
    from elmo.hub import load_model
    from elmo.inference.embed import Embedder

    started = time.time()
    senses = WordNetSenses(args.wordnet)
    embedder = Embedder(load_model(args.bilm), batch_size=64)
    semcor = read_semcor(args.semcor)
    keys, centroids = sense_centroids((token.keys, vectors) for token, vectors in
                                      annotated_token_vectors(embedder, semcor) if token.keys)
    semcor_seconds = time.time() - started
    test = read_raganato(args.eval)
    instances = list(annotated_token_vectors(embedder, test))
    n_layers = centroids.shape[1]
    gold = {token.instance: token.keys for token, _ in instances}

    def by_set(predicted: dict) -> dict[str, dict]:
        out = {}
        for name in SETS:
            chosen = {i: k for i, k in gold.items() if name == "ALL" or i.startswith(name + ".")}
            out[name] = wsd_scores(chosen, {i: p for i, p in predicted.items() if i in chosen})
        return out

    rows = {"first sense": by_set(first_sense_predictions([t for t, _ in instances], senses))}
    fallbacks = {}
    for layer in range(n_layers):
        predicted, fallbacks[layer] = disambiguate(instances, senses, keys, centroids, layer)
        rows[f"layer {layer}"] = by_set(predicted)
    seconds = time.time() - started

    command = shown_command("experiments/probes.py", sys.argv[1:])
    lines = ["# Word sense disambiguation by nearest sense centroid (the paper's Table 5)", "",
             f"Produced by `{command}`", f"with the biLM `{args.bilm}` ({n_layers} layers: 0 is the token encoder, "
             f"1.. the LSTM layers).", "",
             f"SemCor 3.0 gave centroids for {len(keys):,} sense keys ({len(semcor):,} sentences embedded in "
             f"{semcor_seconds / 60:.1f} min); the whole run took {seconds / 60:.1f} min on this machine "
             f"(2-core CPU). {fallbacks[0]:,} of the {len(gold):,} test instances have no sense of their lemma in "
             f"SemCor and take WordNet's first sense at every layer.", "",
             "F1 (%), as the framework's Scorer.java computes it:", "",
             "| method | " + " | ".join(SETS) + " |", "|---|" + "---:|" * len(SETS)]
    for name, scores in rows.items():
        lines.append(f"| {name} | " + " | ".join(f"{100 * scores[s]['f1']:.1f}" for s in SETS) + " |")
    lines += ["", "Precision / recall (%) and the instances answered:", "",
              "| method | " + " | ".join(SETS) + " |", "|---|" + "---:|" * len(SETS)]
    for name, scores in rows.items():
        lines.append(f"| {name} | " + " | ".join(
            f"{100 * scores[s]['precision']:.1f} / {100 * scores[s]['recall']:.1f} "
            f"({scores[s]['answered']:,} of {scores[s]['instances']:,})" for s in SETS) + " |")
    lines += ["", "The paper, F1 on ALL with its 1B Word Benchmark biLM: " +
              ", ".join(f"{k} {v}" for k, v in PAPER_WSD.items()) + ".", ""]
    best = max((r for r in rows if r.startswith("layer")), key=lambda r: rows[r]["ALL"]["f1"])
    lines.append(f"Best layer on ALL here: {best} ({100 * rows[best]['ALL']['f1']:.1f} F1).")
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    atomic_write_text(args.output, "\n".join(lines) + "\n")
    plot(args.output.replace(".md", ".png"), rows, "WSD F1 on ALL by layer", "ALL")
    print("\n".join(lines))


def pos(args) -> None:
    from probes_lib.linear import (
        accuracy,
        label_ids,
        layer_token_features,
        train_linear_probe,
        word_vector_features,
    )

    from elmo.fileio import atomic_write_text
    from elmo.hub import load_model
    from elmo.inference.embed import Embedder
    from elmo.inference.layer_cache import load_or_compute
    from elmo.tasks.catalog import read_dataset
    from elmo.tasks.features import load_vectors

    started = time.time()
    embedder = Embedder(load_model(args.bilm), batch_size=64)
    datasets = {
        "PTB WSJ sample (Penn tags)": {split: read_dataset("ptb-sample", args.ptb, split) for split in ("train", "dev", "test")},
        "UD English-EWT (UPOS)": {split: read_dataset("ud-ewt", os.path.join(args.ewt, f"en_ewt-ud-{split}.conllu.gz"))
                                  for split in ("train", "dev", "test")},
    }
    rows: dict[str, dict[str, dict]] = {}
    sizes = {}
    for name, splits in datasets.items():
        labels = {t: i for i, t in enumerate(sorted({t for s in splits["train"] for t in s.tags}))}
        y = {split: label_ids([s.tags for s in sentences], labels) for split, sentences in splits.items()}
        sizes[name] = {split: len(v) for split, v in y.items()}
        words = {w.lower() for sentences in splits.values() for s in sentences for w in s.tokens}
        vectors, dim = load_vectors(args.vectors, words)
        features = {"GloVe": {split: word_vector_features([s.tokens for s in sentences], vectors, dim)
                              for split, sentences in splits.items()}}
        caches = {split: load_or_compute(embedder, [s.tokens for s in sentences], args.cache,
                                         f"probe-{name.split()[0].lower()}-{split}", progress=False)
                  for split, sentences in splits.items()}
        n_layers = caches["train"].n_layers
        for layer in range(n_layers):
            features[f"layer {layer}"] = {split: layer_token_features(c, layer) for split, c in caches.items()}
        for method, x in features.items():
            probe, history = train_linear_probe(x["train"], y["train"], x["dev"], y["dev"], len(labels))
            rows.setdefault(method, {})[name] = {"f1": accuracy(probe, x["test"], y["test"]),
                                                 "dev": max(history), "epochs": len(history)}
            print(f"{name} {method}: test {100 * rows[method][name]['f1']:.2f}", file=sys.stderr)
    seconds = time.time() - started
    names = list(datasets)
    command = shown_command("experiments/probes.py", sys.argv[1:])
    lines = ["# Part of speech from one layer: linear probes (the paper's Table 6)", "",
             f"Produced by `{command}`", f"with the biLM `{args.bilm}`; {seconds / 60:.1f} min on this machine (2-core CPU, "
             "biLM layers computed once and cached).", "",
             "Test accuracy (%) of a linear softmax layer trained on the frozen vectors of one layer (0: the token "
             "encoder, 1..: the LSTM layers), or on the GloVe 6B 50-d vectors of the same words (zeros for words "
             "without one). Adam, the epoch with the best dev accuracy kept.", "",
             "| features | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for method, scores in rows.items():
        lines.append(f"| {method} | " + " | ".join(f"{100 * scores[n]['f1']:.2f}" for n in names) + " |")
    lines += ["", "Tokens (train / dev / test): " + "; ".join(
        f"{n}: {sizes[n]['train']:,} / {sizes[n]['dev']:,} / {sizes[n]['test']:,}" for n in names) + ".",
              "PTB sample split by file: wsj_0001-0142 train, wsj_0143-0172 dev, wsj_0173-0199 test.", "",
              "The paper, PTB WSJ (full treebank) with its 1B Word Benchmark biLM: "
              + ", ".join(f"{k} {v}" for k, v in PAPER_POS.items()) + "."]
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    atomic_write_text(args.output, "\n".join(lines) + "\n")
    plot(args.output.replace(".md", ".png"), rows, "POS probe accuracy by layer",
         names[0], ylabel="test accuracy (%)", reference="GloVe", series=names)
    print("\n".join(lines))


# The paper's Table 4 queries, whole, as SemCor has them (a query is never its own neighbour).
NEIGHBOUR_QUERIES = ["Chico Ruiz made a spectacular play on Alusik 's grounder in the hole in the fourth and Wert "
                     "came up with some good stops and showed a strong arm at third base .",
                     "Olivia De Havilland signed to do a Broadway play for Garson Kanin this season , `` A Gift of "
                     "Time '' ."]


def neighbours(args) -> None:
    from probes_lib.wsd import read_semcor

    from elmo.fileio import atomic_write_text
    from elmo.hub import load_model
    from elmo.inference.embed import Embedder
    from elmo.inference.neighbours import contextual_neighbours
    from elmo.tasks.features import load_vectors

    started = time.time()
    embedder = Embedder(load_model(args.bilm), batch_size=64)
    corpus = [s.words_and_spans()[0] for s in read_semcor(args.semcor)]
    n_layers = embedder.model.config.n_output_layers
    command = shown_command("experiments/probes.py", sys.argv[1:])
    lines = ["# Contextual nearest neighbours of \"play\" (the paper's Table 4)", "",
             f"Produced by `{command}` with the biLM `{args.bilm}`.", "",
             f"The corpus is SemCor 3.0 ({len(corpus):,} sentences); each query's \"{args.word}\" is compared by cosine "
             f"with every use of \"{args.word}\" in it, at each biLM layer.", ""]
    for query in NEIGHBOUR_QUERIES:
        lines += [f"## Query: {query}", ""]
        for layer in range(1, n_layers):
            found = contextual_neighbours(embedder, query, args.word, corpus, layer=layer, k=args.k,
                                          cache_dir=args.cache)
            lines += [f"Layer {layer}:", "", "| cosine | SemCor sentence |", "|---:|---|"]
            lines += [f"| {n.score:.3f} | {n.highlighted().replace('|', '/')} |" for n in found]
            lines.append("")
    vocabulary = [line.split(" ", 1)[0] for line in read_lines(args.vectors)]
    vectors, _ = load_vectors(args.vectors, vocabulary)
    words = list(vectors)
    matrix = np.stack([vectors[w] for w in words])
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True) + 1e-12
    scores = matrix @ matrix[words.index(args.word)]
    nearest = [words[i] for i in np.argsort(-scores) if words[i] != args.word][:args.k * 2]
    lines += ["## GloVe, context-free", "",
              f"The nearest words to \"{args.word}\" in GloVe 6B 50-d ({len(words):,} words), the same for every use: "
              + ", ".join(nearest) + ".", "",
              f"Time: {(time.time() - started) / 60:.1f} min on this machine (2-core CPU)."]
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    atomic_write_text(args.output, "\n".join(lines) + "\n")
    print("\n".join(lines))


def plot(path: str, rows: dict, title: str, column: str, ylabel: str = "F1 (%)", reference: str = "first sense",
         series: Sequence[str] | None = None) -> None:
    """Score per layer (one line per column in ``series``, default just ``column``) with the
    ``reference`` row as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = [r for r in rows if r.startswith("layer")]
    figure, axes = plt.subplots(figsize=(5, 3.4))
    for i, name in enumerate(series or [column]):
        color = f"C{i}"
        axes.plot(range(len(layers)), [100 * rows[r][name]["f1"] for r in layers], marker="o", color=color,
                  label=name if series else "biLM layer")
        if reference in rows:
            axes.axhline(100 * rows[reference][name]["f1"], color=color, linestyle="--", alpha=0.6,
                         label=f"{reference}" + (f" ({name})" if series else ""))
    axes.set_xticks(range(len(layers)), [r.split()[1] for r in layers])
    axes.set_xlabel("biLM layer")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="probe", required=True)
    p = sub.add_parser("wsd", help="word sense disambiguation by nearest sense centroid (Table 5)")
    p.add_argument("--semcor", default="../shared/data/wsd/semcor3.0_tokens.tsv.gz")
    p.add_argument("--eval", default="../shared/data/wsd/raganato-eval/ALL/ALL.data.xml",
                   help="the framework's ALL.data.xml (its gold keys beside it)")
    p.add_argument("--wordnet", default="/usr/share/wordnet", help="WordNet 3.0 dict folder (apt-get install wordnet-base)")
    p.add_argument("--bilm", default="default")
    p.add_argument("--output", default="docs/probes/wsd.md")
    p = sub.add_parser("pos", help="linear POS probes on each layer and on GloVe (Table 6)")
    p.add_argument("--ptb", default="../shared/data/nltk/treebank.zip", help="NLTK's treebank.zip")
    p.add_argument("--ewt", default="../shared/data/pos/ud-english-ewt", help="folder of en_ewt-ud-*.conllu.gz")
    p.add_argument("--vectors", default="../shared/data/vectors/glove.6B.50d.top100k.txt.gz")
    p.add_argument("--cache", default="cache/layers", help="biLM layer cache")
    p.add_argument("--bilm", default="default")
    p.add_argument("--output", default="docs/probes/pos.md")
    p = sub.add_parser("neighbours", help="contextual nearest neighbours of 'play' in SemCor (Table 4)")
    p.add_argument("--semcor", default="../shared/data/wsd/semcor3.0_tokens.tsv.gz")
    p.add_argument("--vectors", default="../shared/data/vectors/glove.6B.50d.top100k.txt.gz")
    p.add_argument("--word", default="play")
    p.add_argument("-k", type=int, default=5)
    p.add_argument("--cache", help="keep every layer of the whole corpus here (without it, only the sentences "
                                   "holding the word are embedded)")
    p.add_argument("--bilm", default="default")
    p.add_argument("--output", default="docs/probes/neighbours.md")
    args = parser.parse_args(argv)
    if args.probe == "neighbours":
        neighbours(args)
    elif args.probe == "wsd":
        wsd(args)
    elif args.probe == "pos":
        pos(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
