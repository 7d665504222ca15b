"""sacreBLEU as an `evaluate` metric module that loads from this file, without the Hugging Face Hub.

`evaluate.load("sacrebleu")` fetches its script from the Hub, so it fails offline. This file is the same
metric (the interface of evaluate-metric/sacrebleu: `predictions` = list of strings, `references` = list of
strings or of lists of strings, one list per prediction), loaded by path:
`evaluate.load(".../metrics_sacrebleu/metrics_sacrebleu.py")` (see `vanilla_transformer.evaluation.bleu`). It also
returns sacreBLEU's signature string (`nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:...`), which is
what makes a BLEU score comparable with another (Post, 2018).

Defaults are the standard WMT setting: cased, the `13a` tokenizer (mteval-v13a), exponential smoothing, on
detokenized text.

This file imports only evaluate, datasets and sacrebleu: `evaluate` copies it into its module cache and
imports it there, outside this package.
"""

import datasets
import evaluate
from sacrebleu.metrics import BLEU


_CITATION = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    publisher = "Association for Computational Linguistics",
    url = "https://www.aclweb.org/anthology/W18-6319",
    pages = "186--191",
}
"""

_DESCRIPTION = """\
Corpus BLEU computed by sacreBLEU on detokenized text, with its signature string.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of str): detokenized system outputs.
    references (list of str, or list of list of str): the detokenized reference(s) of each prediction;
        every prediction must have the same number of references.
    tokenize (str): sacreBLEU tokenizer, "13a" (default, WMT standard), "intl", "zh", "char", "none", ...
    lowercase (bool): case-insensitive BLEU if True. Default False (cased, as in the paper).
    smooth_method (str): "exp" (default), "floor", "add-k" or "none".
    smooth_value (float): for "floor" and "add-k".
    force (bool): do not complain about tokenized-looking input.
    use_effective_order (bool): use the effective n-gram order (sentence BLEU); default False.
Returns:
    score (float): corpus BLEU, 0-100.
    signature (str): sacreBLEU's signature of the settings used.
    counts, totals, precisions, bp, sys_len, ref_len: the statistics behind the score.
Example:
    >>> metric = evaluate.load("vanilla_transformer/evaluation/metrics_sacrebleu/metrics_sacrebleu.py")
    >>> metric.compute(predictions=["Ein Hund läuft."], references=[["Ein Hund läuft."]])["score"]
    100.00000000000004
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class MetricsSacrebleu(evaluate.Metric):
    def _info(self):
        string = datasets.Value("string", id="sequence")
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            homepage="https://github.com/mjpost/sacreBLEU",
            inputs_description=_KWARGS_DESCRIPTION,
            features=[
                datasets.Features({"predictions": string, "references": datasets.Sequence(string, id="references")}),
                datasets.Features({"predictions": string, "references": string}),
            ],
            codebase_urls=["https://github.com/mjpost/sacreBLEU"],
            reference_urls=["https://www.aclweb.org/anthology/W18-6319"],
        )

    def _compute(
        self,
        predictions,
        references,
        tokenize="13a",
        lowercase=False,
        smooth_method="exp",
        smooth_value=None,
        force=False,
        use_effective_order=False,
    ):
        if references and isinstance(references[0], str):
            references = [[reference] for reference in references]
        n_refs = len(references[0]) if references else 0
        if any(len(refs) != n_refs for refs in references):
            raise ValueError("`references`: sacreBLEU needs the same number of references for every prediction.")
        # sacreBLEU takes one stream per reference set: transpose [sentence][ref] -> [ref][sentence].
        streams = [[refs[i] for refs in references] for i in range(n_refs)]
        bleu = BLEU(
            lowercase=lowercase,
            force=force,
            tokenize=tokenize,
            smooth_method=smooth_method,
            smooth_value=smooth_value,
            effective_order=use_effective_order,
        )
        result = bleu.corpus_score(predictions, streams)
        return {
            "score": result.score,
            "signature": str(bleu.get_signature()),
            "counts": result.counts,
            "totals": result.totals,
            "precisions": result.precisions,
            "bp": result.bp,
            "sys_len": result.sys_len,
            "ref_len": result.ref_len,
        }
