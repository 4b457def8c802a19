"""What each biLM layer captures (the paper's section 5.3): one command per analysis, each writing
a Markdown table and a plot of score per layer into docs/probes/.

    python experiments/probes.py wsd --semcor ../shared/data/wsd/semcor3.0_tokens.tsv.gz \
        --eval ../shared/data/wsd/raganato-eval/ALL/ALL.data.xml

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

# The paper's numbers (Peters et al. 2018, Table 5; F1 on ALL).
PAPER_WSD = {"first sense": 65.9, "layer 1": 67.4, "layer 2": 69.0}
SETS = ["senseval2", "senseval3", "semeval2007", "semeval2013", "semeval2015", "ALL"]


def wsd(args) -> None:
    from elmo.embed import Embedder
    from elmo.fileio import atomic_write_text
    from elmo.pretrained import load_model
    from elmo.tasks.wsd import (WordNetSenses, annotated_token_vectors, disambiguate, first_sense_predictions,
                                read_raganato, read_semcor, sense_centroids, wsd_scores)

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

    command = "python experiments/probes.py " + " ".join(sys.argv[1:])
    lines = [f"# Word sense disambiguation by nearest sense centroid (the paper's Table 5)", "",
             f"Produced by `{command}`", f"with the biLM `{args.bilm}` ({n_layers} layers: 0 is the token encoder, "
             f"1.. the LSTM layers).", "",
             f"SemCor 3.0 gave centroids for {len(keys):,} sense keys ({len(semcor):,} sentences embedded in "
             f"{semcor_seconds / 60:.1f} min); the whole run took {seconds / 60:.1f} min on this machine "
             f"(2-core CPU). {fallbacks[0]:,} of the {len(gold):,} test instances have no sense of their lemma in "
             f"SemCor and take WordNet's first sense at every layer.", "",
             "F1 (%), as the framework's Scorer.java computes it (precision and recall are equal where every "
             "instance gets an answer):", "",
             "| method | " + " | ".join(SETS) + " |", "|---|" + "---:|" * len(SETS)]
    for name, scores in rows.items():
        lines.append(f"| {name} | " + " | ".join(f"{100 * scores[s]['f1']:.1f}" for s in SETS) + " |")
    lines += ["", "The paper, F1 on ALL with its 1B Word Benchmark biLM: " +
              ", ".join(f"{k} {v}" for k, v in PAPER_WSD.items()) + ".", ""]
    best = max((r for r in rows if r.startswith("layer")), key=lambda r: rows[r]["ALL"]["f1"])
    lines.append(f"Best layer on ALL here: {best} ({100 * rows[best]['ALL']['f1']:.1f} F1).")
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    atomic_write_text(args.output, "\n".join(lines) + "\n")
    plot(args.output.replace(".md", ".png"), rows, "WSD F1 on ALL by layer", "ALL")
    print("\n".join(lines))


def plot(path: str, rows: dict, title: str, column: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = [r for r in rows if r.startswith("layer")]
    figure, axes = plt.subplots(figsize=(4.5, 3.2))
    axes.plot(range(len(layers)), [100 * rows[r][column]["f1"] for r in layers], marker="o", label="nearest centroid")
    if "first sense" in rows:
        axes.axhline(100 * rows["first sense"][column]["f1"], color="gray", linestyle="--", label="first sense")
    axes.set_xticks(range(len(layers)), [r.split()[1] for r in layers])
    axes.set_xlabel("biLM layer")
    axes.set_ylabel("F1 (%)")
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
    args = parser.parse_args(argv)
    if args.probe == "wsd":
        wsd(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
