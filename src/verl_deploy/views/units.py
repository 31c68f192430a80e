"""What a verl metric measures and in which unit, for the y axis of its plot.

The names are verl's (shared/reference/verl-keys.md §5, `metric_utils.py`): timing_s/* are
seconds, timing_per_token_ms/* milliseconds per token, perf/throughput tokens per second per
device, *_gb gigabytes, lengths tokens. A key this table does not know is labelled by its last
part, without a unit, rather than with a guessed one.
"""

from __future__ import annotations

import re

# (pattern on the key, label); the first match wins. {last} is the key's last part.
LABELS: tuple[tuple[str, str], ...] = (
    (r"^timing_s/step$", "step time (s)"),
    (r"^timing_s/", "{last} time (s)"),
    (r"^timing_per_token_ms/", "{last} (ms per token)"),
    (r"^perf/throughput$", "throughput (tokens/s per device)"),
    (r"^perf/time_per_step$", "step time (s)"),
    (r"^perf/total_num_tokens$", "tokens per step"),
    (r"_gb$", "{last} (GB)"),
    (r"^perf/mfu", "MFU (fraction of peak)"),
    (r"(?:^|/)clip_ratio$", "clipped (fraction)"),
    (r"^(?:response|prompt)_length(?:_non_aborted)?/", "{last} length (tokens)"),
    (r"^response/aborted_ratio$", "aborted (fraction)"),
    (r"^val-(?:core|aux)/[^/]+/acc/", "accuracy (0–1)"),
    (r"^val-(?:core|aux)/[^/]+/(?:score|reward)/", "score"),
    (r"^val-(?:core|aux)/.*num_turns", "turns"),
    (r"^critic/score/", "{last} score"),
    (r"^critic/rewards/", "{last} reward"),
    (r"^critic/advantages/", "{last} advantage"),
    (r"^critic/returns/", "{last} return"),
    (r"(?:^|/)acc(?:/|$)", "accuracy (0–1)"),
    (r"entropy", "entropy (nats per token)"),
    (r"clipfrac", "clipped (fraction of tokens)"),
    (r"^actor/grad_norm$", "gradient norm (L2)"),
    (r"^actor/lr$", "learning rate"),
    (r"^actor/(?:ppo_kl|kl_loss)$", "KL divergence (nats)"),
    (r"^actor/kl_coef$", "KL coefficient"),
    (r"^actor/pg_loss$", "policy-gradient loss"),
    (r"^train/num_gen_batches$", "generation batches"),
    (r"^training/epoch$", "epoch"),
)
COMPILED = tuple((re.compile(pattern), label) for pattern, label in LABELS)


def axis_label(key: str) -> str:
    last = key.rsplit("/", 1)[-1]
    for pattern, label in COMPILED:
        if pattern.search(key):
            return label.format(last=last)
    return last
