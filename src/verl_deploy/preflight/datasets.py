"""Probe: parquet datasets — candidates under the search roots, and what verl's RL loader needs in the chosen ones.

verl's RLHFDataset reads `data.prompt_key` (a list of {role, content} messages) and the reward
needs `data_source` and `reward_model.ground_truth`. Only the schema and the first rows are read,
so a 2 GB file costs no more than a small one. Duplicated rows are normal (DAPO-Math-17k repeats
each prompt about 100 times) and not reported.
"""

from __future__ import annotations

import os

from verl_deploy.preflight.context import Context
from verl_deploy.preflight.models import walk
from verl_deploy.preflight.report import Area

SAMPLE_ROWS = 5


def _parquets(path: str, entries) -> list[str]:
    return [e.path for e in entries if e.name.endswith(".parquet") and e.is_file(follow_symlinks=True)]


def find_datasets(roots: list[str]) -> tuple[list[str], bool]:
    return walk(roots, _parquets, depth=4)


def inspect_parquet(path: str, prompt_key: str) -> tuple[dict, list[tuple[str, str, str]]]:
    """(facts, problems) where problems are (level, message, fix)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    facts: dict = {"path": path}
    try:
        handle = pq.ParquetFile(path)
    except FileNotFoundError:
        return facts, [("error", f"{path} does not exist", "pass the path of a parquet file (absolute, as seen where training runs)")]
    except (OSError, pa.ArrowException) as exc:
        return facts, [("error", f"{path} is not a readable parquet file: {str(exc)[:160]}",
                        "re-download or re-create it (verl's examples/data_preprocess scripts write parquet)")]
    schema = handle.schema_arrow
    facts.update({"rows": handle.metadata.num_rows, "columns": schema.names,
                  "size_mb": round(os.path.getsize(path) / (1 << 20), 1)})
    problems: list[tuple[str, str, str]] = []
    if handle.metadata.num_rows == 0:
        problems.append(("error", f"{path} has no rows", "re-create the dataset"))
    problems += _column_problems(schema, prompt_key)
    if not problems and handle.metadata.num_rows:
        sample = handle.read_row_group(0, columns=[prompt_key, "data_source"]).slice(0, SAMPLE_ROWS).to_pylist()
        empty = [i for i, row in enumerate(sample) if not row[prompt_key] or not row["data_source"]]
        if empty:
            problems.append(("warning", f"row(s) {empty} have an empty prompt or data_source", "check the conversion"))
        facts["data_sources"] = sorted({row["data_source"] for row in sample if row["data_source"]})
    return facts, problems


def _column_problems(schema, prompt_key: str) -> list[tuple[str, str, str]]:
    """The columns verl's RL dataset and reward loop read: the prompt as chat messages, data_source, and
    reward_model with its ground_truth."""
    import pyarrow as pa

    problems: list[tuple[str, str, str]] = []
    if prompt_key not in schema.names:
        problems.append(("error", f"no column {prompt_key!r} (columns: {', '.join(schema.names)})",
                         "set the prompt column with --override data.prompt_key=<column>, or convert the data"))
    elif not _is_messages(schema.field(prompt_key).type):
        problems.append(("error", f"column {prompt_key!r} is {schema.field(prompt_key).type}, not a list of "
                         "{role, content} messages", "convert prompts to chat messages: [{'role': 'user', 'content': ...}]"))
    if "data_source" not in schema.names:
        problems.append(("error", "no column 'data_source' (it selects the reward function)",
                         "add data_source (e.g. 'math_dapo'), or set custom_reward_function.path"))
    if "reward_model" not in schema.names:
        problems.append(("error", "no column 'reward_model' with ground_truth", "add reward_model: {ground_truth: ...}"))
    else:
        kind = schema.field("reward_model").type
        if not (pa.types.is_struct(kind) and "ground_truth" in {f.name for f in kind}):
            problems.append(("error", f"column 'reward_model' is {kind}, without ground_truth",
                             "make reward_model a struct with a ground_truth field"))
    return problems


def _is_messages(kind) -> bool:
    """A list of structs with role and content (what verl's chat template reads)."""
    import pyarrow as pa

    return (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and pa.types.is_struct(kind.value_type) \
        and {"role", "content"} <= {f.name for f in kind.value_type}


def probe_dataset_candidates(context: Context) -> Area:
    area = Area("datasets", "Datasets")
    found, complete = find_datasets(context.search_roots)
    area.data = {"candidates": found, "complete": complete}
    area.info("candidates", (", ".join(found[:8]) + (f" (+{len(found) - 8} more)" if len(found) > 8 else ""))
              if found else f"no *.parquet under {', '.join(context.search_roots)}",
              "" if found else "pass --train-file and --test-file")
    return area


def judge_datasets(area: Area, context: Context) -> None:
    spec = context.spec
    for label, path in (("train file", spec.train_file), ("test file", spec.test_file)):
        if not os.path.exists(path) and context.runner.where != "host" and context.runner.exists(path):
            area.ok(label, f"{path} exists in {context.runner.where} (not inspected from the host)")
            continue
        facts, problems = inspect_parquet(path, spec.prompt_key)
        area.data[label.replace(" ", "_")] = facts
        for level, message, fix in problems:
            if "does not exist" in message and area.data.get("candidates"):
                fix = "found here: " + ", ".join(area.data["candidates"][:4])
            getattr(area, level)(label, message, fix)
        if not problems and label == "train file" and _too_few_rows(area, label, path, facts, spec):
            continue
        if not problems:
            sources = ", ".join(facts.get("data_sources", []))
            area.ok(label, f"{path}: {facts['rows']:,} rows, {facts['size_mb']} MB, data_source {sources}")


def _too_few_rows(area: Area, label: str, path: str, facts: dict, spec) -> bool:
    """verl's train loader draws the generation batch with drop_last=True and asserts it is not empty
    (ray_trainer.py _create_dataloader: "Train dataloader is empty!"), after the model is loaded."""
    rows = facts.get("rows") or 0
    batch = spec.effective_gen_batch_size if spec.mode == "dapo" else spec.batch_size
    if not rows or rows >= batch:
        return False
    flag = "--gen-batch-size" if spec.mode == "dapo" else "--batch-size"
    area.error(label, f"{path} has {rows:,} rows, fewer than one batch of {batch} prompts: verl's loader drops the "
               "incomplete batch and stops with 'Train dataloader is empty!' after loading the model",
               f"use a larger train file, or lower {flag} (and --batch-size) to at most {rows}")
    return True
