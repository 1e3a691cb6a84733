"""What the heads learned (chapter 17): attention scored against the truth, and tested by intervention.

Alignment (Och & Ney, 2003):

- :func:`alignment_error_rate` ``AER = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)`` for a predicted alignment ``A``,
  sure links ``S`` and possible links ``P ⊇ S``, each a **set** of ``(target, source)`` index pairs;
  :func:`corpus_alignment_error_rate` sums the four counts over sentences first;
- :func:`extract_alignment` reads an alignment off an attention map (argmax per target word, or a threshold);
  :func:`monotonic_alignment` is the diagonal baseline;
- :func:`head_alignment_error_rates` scores every cross-attention head of a translation model.

Induction heads (Olsson et al., 2022), in a small attention-only model (:class:`AttentionOnly`) trained on
:func:`repeated_tokens` (a random segment, then the same segment again):

- :func:`previous_token_scores`, :func:`prefix_matching_scores` read attention maps;
  :func:`induction_scores` runs a model on fresh repeated sequences and returns both, per layer and head;
- :func:`ablate_head` (a head's output replaced by zero or by its mean) and :func:`patch_head` (a head's output
  copied from a clean run into a corrupted one) intervene on one head; :func:`repeated_half_loss` measures.
  They and :func:`spearman`, the rank correlation that compares attention with intervention, live in
  :mod:`tfm_lesson.look.intervene` and are importable from here too.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._validate import check_positive_int, renamed_keywords
from ..attention import MultiHeadAttention
from ..masks import causal_mask
from ..norm import LayerNorm
from .intervene import ablate_head, attention_modules, head_outputs, patch_head, spearman, spearman_p_value
from .recording import record_attention

__all__ = ["alignment_error_rate", "corpus_alignment_error_rate", "as_links", "extract_alignment",
           "monotonic_alignment", "cross_attention_maps", "head_alignment_error_rates", "AttentionOnly",
           "repeated_tokens", "repeated_half_loss", "previous_token_scores", "prefix_matching_scores",
           "induction_scores", "attention_modules", "ablate_head", "patch_head", "head_outputs", "spearman",
           "spearman_p_value"]

Link = tuple[int, int]


# -- alignment error rate --------------------------------------------------------------------------------------------
def as_links(links: Iterable, name: str) -> frozenset[Link]:
    """``links`` as a set of ``(target, source)`` pairs of non-negative ints.

    A list or tuple that names a link twice is refused (an alignment is a set: counting a link twice
    would count it twice in ``|A ∩ S|``); a set or frozenset is taken as it is.
    """
    if isinstance(links, (str, bytes, Tensor)) or not isinstance(links, Iterable):
        raise TypeError(f"{name} must be a set of (target, source) index pairs, got {type(links).__name__}")
    items = list(links)
    out: set[Link] = set()
    for item in items:
        if (not isinstance(item, (tuple, list)) or len(item) != 2
                or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in item)):
            raise ValueError(f"{name} must hold (target, source) pairs of non-negative ints, got {item!r}")
        out.add((item[0], item[1]))
    if len(out) != len(items):
        seen, twice = set(), []
        for item in items:
            key = (item[0], item[1])
            if key in seen:
                twice.append(key)
            seen.add(key)
        raise ValueError(f"{name} names the link(s) {sorted(set(twice))[:5]} more than once: an alignment is a "
                         "set of links; pass set(...) of it")
    return frozenset(out)


def _counts(predicted, sure, possible) -> tuple[int, int, int, int]:
    a = as_links(predicted, "predicted")
    s = as_links(sure, "sure")
    p = s if possible is None else as_links(possible, "possible")
    if not s <= p:
        raise ValueError(f"sure must be a subset of possible (S ⊆ P); {sorted(s - p)[:5]} are sure but not possible")
    return len(a & s), len(a & p), len(a), len(s)


def alignment_error_rate(predicted, sure, possible=None) -> float:
    """Och & Ney's (2003) alignment error rate of one sentence, in [0, 1]; 0 = perfect.

    ``predicted`` (A), ``sure`` (S) and ``possible`` (P, default S) are sets of ``(target, source)`` index
    pairs, ``S ⊆ P``: ``AER = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)``. Lists are accepted when no link
    repeats; a repeated link raises ``ValueError`` (see :func:`as_links`).
    """
    a_s, a_p, a, s = _counts(predicted, sure, possible)
    if a + s == 0:
        raise ValueError("AER is undefined when both predicted and sure are empty")
    return 1.0 - (a_s + a_p) / (a + s)


def corpus_alignment_error_rate(sentences: Iterable[tuple]) -> float:
    """AER over a corpus: ``sentences`` yields ``(predicted, sure, possible)`` per sentence; the counts are
    summed over sentences before the ratio is taken (as Och & Ney report it)."""
    totals = [0, 0, 0, 0]
    n = 0
    for k, item in enumerate(sentences):
        if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
            raise ValueError(f"sentence {k}: expected (predicted, sure, possible), got {type(item).__name__}")
        counts = _counts(item[0], item[1], item[2] if len(item) == 3 else None)
        totals = [t + c for t, c in zip(totals, counts)]
        n += 1
    if n == 0:
        raise ValueError("sentences is empty")
    a_s, a_p, a, s = totals
    if a + s == 0:
        raise ValueError("AER is undefined when every predicted and sure alignment is empty")
    return 1.0 - (a_s + a_p) / (a + s)


def extract_alignment(weights: Tensor, method: str = "argmax", threshold: float = 0.5,
                      source_len: int | None = None) -> set[Link]:
    """An alignment read off one attention map ``weights`` ``(target_len, k_len)``.

    ``method="argmax"``: each target word links to its most attended key; ``"threshold"``: to every key with
    weight ``>= threshold``. Keys from ``source_len`` on (``</s>``, padding) are not words: a target word whose
    argmax falls there gets no link (attention parked on ``</s>`` reads as "aligned to nothing").
    """
    if not isinstance(weights, Tensor) or weights.dim() != 2:
        raise ValueError(f"weights must be a (target_len, k_len) tensor, got "
                         f"{tuple(weights.shape) if isinstance(weights, Tensor) else type(weights).__name__}")
    if method not in ("argmax", "threshold"):
        raise ValueError(f"method must be 'argmax' or 'threshold', got {method!r}")
    source_len = weights.size(1) if source_len is None else source_len
    if not isinstance(source_len, int) or not 0 < source_len <= weights.size(1):
        raise ValueError(f"source_len must be an int in [1, {weights.size(1)}] (the map's k_len), got {source_len!r}")
    w = weights.detach().float().cpu()
    if method == "argmax":
        best = w.argmax(-1).tolist()
        return {(t, s) for t, s in enumerate(best) if s < source_len}
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
    hits = (w[:, :source_len] >= threshold).nonzero().tolist()
    return {(t, s) for t, s in hits}


def monotonic_alignment(target_len: int, source_len: int) -> set[Link]:
    """The diagonal baseline: target word ``t`` links to source word ``floor((t + 0.5) * source_len / target_len)``."""
    check_positive_int(target_len, "target_len")
    check_positive_int(source_len, "source_len")
    return {(t, min(source_len - 1, int((t + 0.5) * source_len / target_len))) for t in range(target_len)}


def cross_attention_maps(model: nn.Module, source: Sequence[int], target: Sequence[int],
                         device: torch.device | str | None = None) -> Tensor:
    """Cross-attention of every decoder layer of a :class:`tfm_lesson.Transformer` under teacher forcing.

    ``source``: ids ending in ``</s>``; ``target``: ids ``<s> y_1 ... y_n </s>``. Returns
    ``(layers, heads, n + 1, src_len)``: row ``j`` is the query that predicts ``y_{j+1}`` (row ``n``
    predicts ``</s>``).
    """
    device = device or next(model.parameters()).device
    src = torch.as_tensor(list(source), device=device)[None]
    tgt = torch.as_tensor(list(target), device=device)[None]
    was = model.training
    model.eval()
    try:
        with torch.no_grad(), record_attention(model) as record:
            model(src, tgt[:, :-1])
    finally:
        model.train(was)
    layers = record.layers("cross")
    if not layers:
        raise ValueError(f"{type(model).__name__} has no cross-attention (a translation Transformer is expected)")
    return torch.stack([record.get(kind="cross", layer=i)[0] for i in layers]).cpu()


def head_alignment_error_rates(model: nn.Module, pairs: Sequence, src_vocab, tgt_vocab, method: str = "argmax",
                               threshold: float = 0.5, shift: int = 0) -> Tensor:
    """Corpus AER of every cross-attention head, ``(layers, heads)``, against the gold alignments of ``pairs``.

    ``pairs``: :class:`tfm_lesson.data.alignments.AlignedPair` items (``en``, ``fr``, ``sure``, ``possible``).
    French word ``t`` is read from the row that **predicts** it (``shift=0``) or from the row where it is the
    decoder's **input** (``shift=1``, one step later, when the decoder has seen the word).
    """
    if shift not in (0, 1):
        raise ValueError(f"shift must be 0 (the row predicting the word) or 1 (the row reading it), got {shift!r}")
    if not pairs:
        raise ValueError("pairs is empty")
    per_head: dict[tuple[int, int], list] = {}
    for pair in pairs:
        src = src_vocab.encode(pair.en)
        tgt = tgt_vocab.encode(pair.fr, bos=True)
        n_src, n_tgt = len(src) - 1, len(tgt) - 2
        if n_src != len(pair.en_tokens) or n_tgt != len(pair.fr_tokens):
            raise ValueError(f"the vocabularies tokenise {pair.en!r} / {pair.fr!r} into {n_src} / {n_tgt} tokens, "
                             f"the alignment has {len(pair.en_tokens)} / {len(pair.fr_tokens)}")
        maps = cross_attention_maps(model, src, tgt)  # (layers, heads, n_tgt + 1, n_src + 1)
        rows = maps[:, :, shift:shift + n_tgt, :]  # one row per French word
        for layer in range(maps.size(0)):
            for head in range(maps.size(1)):
                links = extract_alignment(rows[layer, head], method, threshold, source_len=n_src)
                per_head.setdefault((layer, head), []).append((links, pair.sure, pair.possible))
    layers = 1 + max(l for l, _ in per_head)
    heads = 1 + max(h for _, h in per_head)
    out = torch.zeros(layers, heads)
    for (layer, head), items in per_head.items():
        out[layer, head] = corpus_alignment_error_rate(items)
    return out


# -- a two-layer attention-only model and its data -------------------------------------------------------------------
@renamed_keywords(layers="num_layers")
class AttentionOnly(nn.Module):
    """A decoder-only Transformer without feed-forward blocks: token and learned position embeddings, then
    ``num_layers`` pre-norm blocks ``x = x + MultiHeadAttention(LayerNorm(x))`` (causal), a final LayerNorm and a
    linear read-out to the vocabulary. Input ``(batch, seq_len)`` ids, output ``(batch, seq_len, vocab_size)``
    logits."""

    def __init__(self, vocab_size: int, d_model: int = 64, heads: int = 4, num_layers: int = 2,
                 max_len: int = 64) -> None:
        super().__init__()
        for value, name in ((vocab_size, "vocab_size"), (d_model, "d_model"), (heads, "heads"),
                            (num_layers, "num_layers"), (max_len, "max_len")):
            check_positive_int(value, name)
        self.vocab_size, self.max_len = vocab_size, max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.norms = nn.ModuleList(LayerNorm(d_model) for _ in range(num_layers))
        self.layers = nn.ModuleList(nn.ModuleDict({"attn": MultiHeadAttention(d_model, heads)})
                                    for _ in range(num_layers))
        self.norm = LayerNorm(d_model)
        self.out = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: Tensor) -> Tensor:
        if not isinstance(tokens, Tensor) or tokens.dim() != 2 or tokens.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"tokens must be an integer tensor (batch, seq_len), got "
                             f"{tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__}")
        length = tokens.size(1)
        if length > self.max_len:
            raise ValueError(f"seq_len {length} is longer than max_len={self.max_len}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            raise ValueError(f"tokens must be ids in [0, {self.vocab_size}), got [{tokens.min()}, {tokens.max()}]")
        x = self.embed(tokens) + self.pos(torch.arange(length, device=tokens.device))  # (batch, len, d_model)
        mask = causal_mask(length, device=tokens.device)
        for norm, layer in zip(self.norms, self.layers):
            h = norm(x)
            x = x + layer["attn"](h, h, h, mask)[0]
        return self.out(self.norm(x))  # (batch, len, vocab)


def repeated_tokens(batch: int, seg_len: int, vocab_size: int, generator: torch.Generator | None = None,
                    bos: int = 0) -> Tensor:
    """``(batch, 1 + 2 * seg_len)`` ids: ``bos``, a segment of ``seg_len`` random tokens from ``1 .. vocab_size - 1``,
    then the same segment again. Only the repeated half can be predicted (by copying)."""
    for value, name in ((batch, "batch"), (seg_len, "seg_len")):
        check_positive_int(value, name)
    if not isinstance(vocab_size, int) or vocab_size < 3:
        raise ValueError(f"vocab_size must be an int >= 3 (bos and at least two tokens), got {vocab_size!r}")
    seg = torch.randint(1, vocab_size, (batch, seg_len), generator=generator)
    start = torch.full((batch, 1), bos, dtype=torch.long)
    return torch.cat([start, seg, seg], dim=1)


def repeated_half_loss(logits: Tensor, tokens: Tensor, seg_len: int, half: str = "second") -> Tensor:
    """Mean next-token cross-entropy over the predictions of one half of :func:`repeated_tokens` sequences.

    ``half="second"``: the predictions of tokens ``seg_len + 2 .. 2 seg_len`` (the repeat, its first token
    excepted: nothing announces it); ``"first"``: tokens ``2 .. seg_len`` (random, so about ``log(vocab - 1)``).
    """
    if logits.dim() != 3 or logits.shape[:2] != tokens.shape:
        raise ValueError(f"logits must be (batch, seq_len, vocab) matching tokens {tuple(tokens.shape)}, "
                         f"got {tuple(logits.shape)}")
    if tokens.size(1) != 1 + 2 * seg_len:
        raise ValueError(f"tokens must have 1 + 2 * seg_len = {1 + 2 * seg_len} positions, got {tokens.size(1)}")
    if half == "second":
        queries = range(seg_len + 1, 2 * seg_len)  # predicts tokens seg_len+2 .. 2 seg_len
    elif half == "first":
        queries = range(1, seg_len)
    else:
        raise ValueError(f"half must be 'first' or 'second', got {half!r}")
    q = torch.tensor(list(queries), device=logits.device)
    return F.cross_entropy(logits[:, q].flatten(0, 1), tokens[:, q + 1].flatten())


# -- scores read off attention ---------------------------------------------------------------------------------------
def _check_maps(attention: Tensor, name: str = "attention") -> Tensor:
    if not isinstance(attention, Tensor) or attention.dim() < 2 or attention.size(-1) != attention.size(-2):
        raise ValueError(f"{name} must be self-attention weights (..., seq_len, seq_len), got "
                         f"{tuple(attention.shape) if isinstance(attention, Tensor) else type(attention).__name__}")
    return attention


def previous_token_scores(attention: Tensor) -> Tensor:
    """Mean attention from each query ``t >= 1`` to key ``t - 1``. ``attention`` ``(..., seq_len, seq_len)`` →
    ``(...)`` (e.g. ``(batch, heads, L, L)`` → ``(batch, heads)``)."""
    a = _check_maps(attention)
    if a.size(-1) < 2:
        raise ValueError("previous_token_scores needs seq_len >= 2")
    return torch.diagonal(a, offset=-1, dim1=-2, dim2=-1).mean(-1)


def prefix_matching_scores(attention: Tensor, seg_len: int) -> Tensor:
    """Mean attention, over the queries of the **repeated** half of :func:`repeated_tokens` sequences, to the
    key just after the earlier copy of the query's token (``t - seg_len + 1``): what an induction head attends to.
    ``attention`` ``(..., 1 + 2 seg_len, 1 + 2 seg_len)`` → ``(...)``."""
    a = _check_maps(attention)
    check_positive_int(seg_len, "seg_len")
    if a.size(-1) != 1 + 2 * seg_len:
        raise ValueError(f"attention must cover 1 + 2 * seg_len = {1 + 2 * seg_len} positions, got {a.size(-1)}")
    queries = torch.arange(seg_len + 1, 2 * seg_len + 1)  # the repeated half
    keys = queries - seg_len + 1
    return a[..., queries, keys].mean(-1)


def induction_scores(model: nn.Module, seg_len: int = 20, batch: int = 32, seed: int = 0) -> dict[str, Tensor]:
    """Run ``model`` (an :class:`AttentionOnly`, or any causal model of ids with tfm_lesson attention) on fresh
    :func:`repeated_tokens` and score every head. Returns ``{"prefix_matching": (layers, heads),
    "previous_token": (layers, heads)}``: a head with a high prefix-matching score attends like an induction
    head; whether it also *copies* is what ablation and patching test."""
    vocab_size = getattr(model, "vocab_size", None)
    if not isinstance(vocab_size, int):
        raise ValueError("model must have an int vocab_size attribute (e.g. tfm_lesson.look.interpret.AttentionOnly)")
    g = torch.Generator().manual_seed(seed)
    tokens = repeated_tokens(batch, seg_len, vocab_size, g).to(next(model.parameters()).device)
    was = model.training
    model.eval()
    try:
        with torch.no_grad(), record_attention(model) as record:
            model(tokens)
    finally:
        model.train(was)
    maps = torch.stack(list(record.maps.values())).cpu()  # (layers, batch, heads, L, L)
    return {"prefix_matching": prefix_matching_scores(maps, seg_len).mean(1),
            "previous_token": previous_token_scores(maps).mean(1)}
