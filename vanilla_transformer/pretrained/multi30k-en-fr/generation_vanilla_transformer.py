"""The decoding rules, written once: the length penalty's forms, the GNMT penalty, the beam's candidates per step, and
the check of the decoding options.

Section 6.1 decodes "with a beam size of 4 and length penalty alpha = 0.6 (Wu et al., 2016)": the GNMT penalty of the
authors' tensor2tensor (`utils/beam_search.py`) and of OpenNMT-py (`-length_penalty wu`). transformers' beam search
divides by length ** alpha instead (as fairseq and CTranslate2 do). The generation config's `length_penalty_form`
picks one; saved in generation_config.json as an extra attribute (transformers keeps those), absent = "length".

A remote-code file that imports only the standard library: the model code imports it (a relative import, so
`save_pretrained` copies it beside the model), and so do the command line (it checks the decoding options before
torch is loaded), the training options, the library's `translate`, the CTranslate2 engine and the web demo (whose
decoding steps redo the search's ranking with these same rules).
"""

import math


LENGTH_PENALTY_FORMS = {
    "length": "log P(Y) / |Y| ** alpha (transformers' beam search, fairseq, CTranslate2)",
    "gnmt": "log P(Y) / ((5 + |Y|) / 6) ** alpha (Wu et al., 2016: the paper's, tensor2tensor, OpenNMT-py `wu`)",
}


def gnmt_length_penalty(length: int, alpha: float) -> float:
    """lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al., 2016, eq. 14); |Y| counts the generated tokens, `</s>` included,
    as tensor2tensor counts them."""
    return ((5.0 + length) / 6.0) ** alpha


def length_penalty_divisor(form: str, length: int, alpha: float) -> float:
    """What a finished hypothesis' log P(Y) is divided by in the form `form` (LENGTH_PENALTY_FORMS): |Y| ** alpha for
    "length" (transformers' beam search), the GNMT lp(Y) for "gnmt"; |Y| counts the generated tokens, `</s>` included."""
    return gnmt_length_penalty(length, alpha) if form == "gnmt" else length**alpha


def beams_to_keep(num_beams: int, eos_token_ids) -> int:
    """How many candidates a beam search step ranks: 2 x beam, more with several end tokens (tensor2tensor's
    2 * beam_size, transformers' `beams_to_keep`), so that `num_beams` of them still run when the best ones all end."""
    return max(2, 1 + len(eos_token_ids)) * num_beams


def check_positive_int(name: str, value, *, minimum: int = 1, none: str | None = None) -> None:
    """The one check of a count (a beam, a batch, a width, a number of steps): ValueError naming `name` as the caller
    spells it (a flag, or a field in backquotes) unless `value` is an integer (not a bool) of at least `minimum`.
    `none`: None is allowed, and what it means (said in the message where not ""), e.g. "None = d_model / h". Written
    here, in a file of the standard library alone, so that the remote-code files, the data and training modules and
    the command line before torch share it."""
    if value is None and none is not None:
        return
    or_none = "" if none is None else " or None" + (f" ({none})" if none else "")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer{or_none}, got {value!r}.")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}{or_none}, got {value!r}.")


def check_decoding(
    *,
    batch_size: int | None = None,
    num_beams: int | None = None,
    n_best: int | None = None,
    max_new_tokens: int | None = None,
    length_penalty: float | None = None,
    length_penalty_form: str | None = None,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    max_beams: int | None = None,
    names: dict[str, str] | None = None,
) -> None:
    """The one check of the decoding options, for every caller: the command line (before anything loads), the
    library's `translate`, the model's `generate`, the CTranslate2 engine, the training options and the web demo.
    Each option given (None: not given) must be: `batch_size`, `num_beams`, `n_best`, `max_new_tokens` integers of at
    least 1
    (`num_beams` also at most `max_beams` when that is given; `n_best` at most `num_beams` when both are given);
    `length_penalty` finite; `length_penalty_form` one of LENGTH_PENALTY_FORMS, with "gnmt" an alpha of 0 or more
    (its bound on what a running hypothesis can still reach holds for alpha >= 0 only; Wu et al. use 0 to 1);
    `temperature` above 0; `top_k` 0 or more; `top_p` in (0, 1]. A ValueError names the option as `names` spells it
    (default: its Python name in backquotes, e.g. "`batch_size` must be at least 1, got 0.")."""
    names = names or {}

    def name(option: str) -> str:
        return names.get(option, f"`{option}`")

    for option, value in (
        ("batch_size", batch_size),
        ("num_beams", num_beams),
        ("n_best", n_best),
        ("max_new_tokens", max_new_tokens),
    ):
        if value is None:
            continue
        if option == "num_beams" and max_beams is not None and isinstance(value, int) and not 1 <= value <= max_beams:
            raise ValueError(f"{name(option)} must be between 1 and {max_beams}, got {value}.")
        check_positive_int(name(option), value)
    if n_best is not None and num_beams is not None and n_best > num_beams:
        raise ValueError(
            f"{name('n_best')} {n_best} is more than {name('num_beams')} {num_beams}: beam search keeps {num_beams} "
            "hypotheses."
        )
    check_length_penalty(length_penalty, length_penalty_form, name)
    if temperature is not None and not temperature > 0:
        raise ValueError(f"{name('temperature')} must be above 0, got {temperature}.")
    if top_k is not None and top_k < 0:
        raise ValueError(f"{name('top_k')} must be 0 or more, got {top_k}.")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"{name('top_p')} must be in (0, 1], got {top_p}.")


def check_length_penalty(alpha: float | None, form: str | None, name=lambda option: f"`{option}`") -> None:
    """The length penalty's part of `check_decoding` (None: not given): alpha finite, the form one of
    LENGTH_PENALTY_FORMS, and "gnmt" with an alpha of 0 or more (its bound on what a running hypothesis can still
    reach holds for alpha >= 0 only; Wu et al. use 0 to 1). `name` spells an option in the message. Also what every
    `generate` call checks of the penalty it decodes with (`length_penalty_form`)."""
    if alpha is not None and not math.isfinite(alpha):
        raise ValueError(f"{name('length_penalty')} must be a finite number, got {alpha}.")
    if form is not None and form not in LENGTH_PENALTY_FORMS:
        raise ValueError(
            f"{name('length_penalty_form')} {form!r} is not a length penalty form: "
            + "; ".join(f"{known!r}: {what}" for known, what in LENGTH_PENALTY_FORMS.items())
            + "."
        )
    if form == "gnmt" and alpha is not None and not alpha >= 0:
        raise ValueError(
            f"{name('length_penalty')} {alpha} with {name('length_penalty_form')} 'gnmt': the GNMT penalty "
            "takes alpha >= 0 (a negative alpha is for the 'length' form, where it favours shorter hypotheses)."
        )


def length_penalty_form(generation_config, **overrides) -> str:
    """The length penalty form a `generate` call decodes with ("length" when none is named), checked with its alpha
    (`check_length_penalty`). `overrides`: the call's own `length_penalty_form` / `length_penalty` (None: not given), which
    win over the generation config's, as `generate`'s keywords do."""
    form = overrides.get("length_penalty_form") or getattr(generation_config, "length_penalty_form", None) or "length"
    alpha = overrides.get("length_penalty")
    alpha = getattr(generation_config, "length_penalty", None) if alpha is None else alpha
    check_length_penalty(alpha, form)
    return form


__all__ = [
    "LENGTH_PENALTY_FORMS",
    "beams_to_keep",
    "check_decoding",
    "check_length_penalty",
    "check_positive_int",
    "gnmt_length_penalty",
    "length_penalty_divisor",
    "length_penalty_form",
]
