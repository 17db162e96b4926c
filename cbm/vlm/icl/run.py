"""One ICL study: episodes -> every model x dataset x condition x episode -> parse -> checker (E5)
-> judge -> statistics -> tables and plots.

Every trial is one JSON record under ``records/`` written when its replies arrive, so a killed run
resumes where it stopped (and the client's reply cache makes even a lost record cost nothing).
Each record also says what produced it (``made_by``: digests of the model's and the judge's
endpoint, model and sampling parameters, of the dataset and episode, of the prompts and judge
options): a record made by other settings is redone, not reused (see :meth:`Study._load`).
``run(cfg)`` writes ``accuracy.{md,csv}``, ``parse_errors.csv``, ``judge.{md,csv}``,
``checker.{md,csv}``, the paper's tables (``accuracy_by_model``, ``accuracy_by_dataset``,
``accuracy_by_nk``, ``judge_by_condition``: ``.csv`` and ``.md``, and in its layout at the top of
``stats.md``), ``losses.{md,csv}`` (re-asks and trials lost, by reason, per condition: also in
``stats.md``), ``stats.{md,json}``, ``radar.png`` and ``results.json``.

A refused answer (:func:`cbm.vlm.icl.parse.refused`, after its re-ask) is never judged: it is in no
judge mean, and the losses table counts it (``judge_skipped_refused``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cbm.core.atomic import write_csv_atomic, write_json_atomic, write_text_atomic
from cbm.core.safe_paths import check_component, inside, slug
from cbm.core.tags import REASK_PROMPT
from cbm.core.validation import conforms
from cbm.vlm.icl import dl
from cbm.vlm.icl.config import ICLConfig
from cbm.vlm.icl.datasets import ICLDataset, make_dataset
from cbm.vlm.icl.episodes import Episode, load_episodes, make_episodes, save_episodes
from cbm.vlm.icl.judge import GLOBAL_METRIC, METRICS, parse_scores, reproducibility
from cbm.vlm.icl.parse import (
    Parsed,
    bullet_features,
    feature_value_pairs,
    pair_text,
    parse_reply,
    refused,
)
from cbm.vlm.icl.tables import (
    SPEARMAN_KEY,
    accuracy_by,
    accuracy_nk_rows,
    accuracy_rows,
    checker_rows,
    columns_of,
    human_agreement,
    judge_by_condition_rows,
    judge_rows,
    loss_rows,
    losses_md,
    paper_tables_md,
    parse_error_rows,
    radar_chart,
    read_human_scores,
    rows_md,
    spearman_by_condition,
    statistics,
    stats_md,
)
from cbm.vlm.messages import reask_turns, user_message
from cbm.vlm.reply import ChatError
from cbm.vlm.sealed import OLDER, client_identity, digest, open_sealed, read_json, seal

Messages = list[dict[str, Any]]
log = logging.getLogger("cbm.vlm")


@dataclass
class Trial:
    model: str
    dataset: str
    condition: str
    episode: Episode

    @property
    def id(self) -> str:
        return f"{self.model}/{self.dataset}/{self.condition}/{self.episode.id}"


def episodes_for(cfg: ICLConfig, ds: ICLDataset) -> list[Episode]:
    """The dataset's saved episodes (checked), or new ones (saved) when there are none; every
    image they use is decoded once first, so a bad file stops the run before anything is written."""
    path = Path(cfg.episodes_dir or Path(cfg.output_dir) / "episodes") / f"{check_component(ds.name, 'datasets')}.json"
    eps = load_episodes(path, cfg.episodes, ds)
    fresh = eps is None
    if eps is None:
        eps = make_episodes(ds.name, ds.labels, ds.class_names, cfg.episodes)
    ds.check_images(s.index for e in eps for s in (*e.support, *e.query))
    if fresh:
        save_episodes(path, eps, cfg.episodes, ds.fingerprint)
    return eps


def options_text(labels: Sequence[str]) -> str:
    return ", ".join(labels)


def trial_messages(cfg: ICLConfig, ds: ICLDataset, trial: Trial) -> Messages:
    """The system prompt (the paper's shared prompt, the condition's instruction injected); each
    support image as a user turn with its label as the assistant turn; the query image. The
    instruction goes where ``{instruction}`` is: the system prompt or the query turn."""
    p, ep = cfg.prompts, trial.episode
    opts = options_text(ep.labels)
    instruction = p["instructions"][trial.condition].format(options=opts)
    system = p["system"].format(instruction=instruction, options=opts)
    msgs: Messages = [{"role": "system", "content": system}] if system.strip() else []
    for i, shot in enumerate(ep.support, 1):
        msgs.append(user_message(p["support_user"].format(index=i, options=opts), [ds.image(shot.index)]))
        msgs.append({"role": "assistant", "content": p["support_assistant"].format(label=shot.label)})
    msgs.append(user_message(p["query"].format(options=opts, instruction=instruction), [ds.image(ep.query[0].index)]))
    return msgs


#: What the judge prompt's ``{response}`` says when the output has no readable label.
NO_RESPONSE = "(none: the output has no label from the options)"


def judge_messages(cfg: ICLConfig, ds: ICLDataset, trial: Trial, output: str, response: str | None = None) -> Messages:
    """The judge's request (A.2): the query image (and, with ``support_images``, the labelled
    examples), the candidate labels, the model's output, its predicted class, the condition's
    description and the rubric."""
    p, ep = cfg.prompts, trial.episode
    images = [ds.image(ep.query[0].index)]
    note = ""
    if cfg.judge_options.support_images:
        images += [ds.image(s.index) for s in ep.support]
        note = ", followed by the labelled examples in order (labels: " + ", ".join(s.label for s in ep.support) + ")"
    text = p["judge"].format(options=options_text(ep.labels), condition=trial.condition, description=p["descriptions"][trial.condition],
                             output=output, response=NO_RESPONSE if response is None else response, rubric=p["rubric"],
                             support_note=note)  # fmt: skip
    return [user_message(text, images)]


def global_messages(cfg: ICLConfig, ds: ICLDataset, trial: Trial, output: str, response: str) -> Messages:
    ep = trial.episode
    cls = ep.classes[ep.labels.index(response)] if response in ep.labels else response
    text = cfg.prompts["judge_global"].format(classes=", ".join(ds.class_names), response=cls, output=output)
    return [user_message(text, [ds.image(ep.query[0].index)])]


def features_of(parsed: Parsed) -> set[str] | None:
    """The features an output names (E3 bullets, E4 ``feature: value`` pairs, E5 ABox); ``None``
    for E1/E2. Explanation Reproducibility compares these sets across reruns."""
    if parsed.condition == "E3":
        return set(bullet_features(parsed.fields.get("features", "")))
    if parsed.condition == "E4":
        return {pair_text(f, v) for f, v in feature_value_pairs(parsed.fields.get("features", ""))}
    if parsed.condition == "E5":
        box, _ = dl.parse_abox(parsed.fields.get("abox", ""))
        return set().union(*box.features.values()) if box.features else set()
    return None


def record_base(t: Trial) -> dict[str, Any]:
    ep = t.episode
    return {"trial": t.id, "model": t.model, "dataset": t.dataset, "condition": t.condition, "episode": ep.id,
            "n_way": ep.n_way, "k_shot": ep.k_shot, "truth": ep.query[0].label, "truth_class": ep.query[0].cls}  # fmt: skip


def reask_messages(msgs: Messages, reply: str, problem: str) -> Messages:
    """``msgs`` continued by the unreadable reply and the re-ask naming ``problem``."""
    return reask_turns(msgs, reply, REASK_PROMPT, problem)


def answer_problem(rec: dict[str, Any]) -> str:
    return "; ".join(f"{i['kind']}: {i['detail']}" for i in rec["parsed"]["issues"]) or "no label"


def answer_record(t: Trial, text: str, reask: str | None = None) -> dict[str, Any]:
    """An answered trial's record: the reply and everything derived from it (parse, correctness,
    the E5 checker, the named features). With ``reask`` (the reply to a re-ask of a first reply
    without a readable label) the re-ask's reply is the output, the first one's issues kept."""
    ep = t.episode
    parsed = parse_reply(text, t.condition, ep.labels)
    first = None
    if reask is not None and parsed.response is None:
        first, parsed = parsed, parse_reply(reask, t.condition, ep.labels)
    rec = {**record_base(t), "status": "answered", "reply": text, "parsed": parsed.to_json(), "correct": parsed.response == ep.query[0].label}
    rec["output"] = text if first is None else reask
    if reask is not None:
        rec["reask"] = reask
        if first is not None:
            rec["first_issues"] = first.to_json()["issues"]
    if t.condition == "E5":
        f = parsed.fields
        rec["checker"] = dl.check(f.get("tbox", ""), f.get("abox", ""), f.get("dl_explanation", ""), parsed.response, ep.labels).to_json()
    feats = features_of(parsed)
    if feats is not None:
        rec["features"] = sorted(feats)
    return rec


def judged(text: str, metrics: Sequence[str], reask: str | None = None) -> dict[str, Any]:
    """The judge's scores from its reply, or (``reask``: the reply to a re-ask of an incomplete one)
    from the re-ask's, the first one's errors kept."""
    s = parse_scores(text, metrics)
    out = {"complete": s.complete, **s.to_json(), "reply": text}
    if reask is not None:
        out["reask"] = reask
        if not s.complete:
            again = parse_scores(reask, metrics)
            out.update(complete=again.complete, **again.to_json(), first_errors=s.errors)
    return out


#: The parts of a saved record that are kept (everything else is derived again from them).
RECORD_SCHEMA = {"trial": str, "status": str, "reply": str, "?reask": str, "?judge": dict, "?judge_global": dict,
                 "?reproducibility": {"runs": [[str]]}}  # fmt: skip


def rebuild_record(t: Trial, saved: Any) -> dict[str, Any] | None:
    """The record of trial ``t`` rebuilt from a saved one's reply texts (``None``: not usable; an
    errored trial is redone anyway)."""
    if not conforms(saved, RECORD_SCHEMA) or saved["trial"] != t.id or saved["status"] != "answered":
        return None
    rec = answer_record(t, saved["reply"], saved.get("reask"))
    for key, metrics in (("judge", METRICS), ("judge_global", (GLOBAL_METRIC,))):
        j = saved.get(key)
        if j is None or refused(rec["parsed"]):  # a refusal is never judged (a record judged before this rule: the judgement dropped)
            continue
        if conforms(j, {"reply": str, "?reask": str}):
            rec[key] = judged(j["reply"], metrics, j.get("reask"))
        elif conforms(j, {"error": str}):
            rec[key] = {"complete": False, "error": j["error"]}
        else:
            return None
    if "reproducibility" in saved:
        runs = saved["reproducibility"]["runs"]
        rec["reproducibility"] = {"runs": runs, "jaccard": reproducibility([set(x) for x in runs])}
    return rec


#: The parts of a record's ``made_by`` its answer depends on (any change: the trial is redone) ...
ANSWER_PARTS = ("model", "data", "prompts")
#: ... and those of each later stage (a change: that stage alone is redone).
STAGE_PARTS = {"judge": ("judge", "judge_prompts"), "judge_global": ("judge", "global_prompt"), "reproducibility": ("reproducibility",)}
#: How a log line names a part of ``made_by``.
PART_NAMES = {"model": "model settings (endpoint, model or sampling)", "data": "dataset or episode", "prompts": "prompts",
              "judge": "judge settings (endpoint, model or sampling)", "judge_prompts": "judge prompt, rubric or options",
              "global_prompt": "judge_global prompt", "reproducibility": "reproducibility settings"}  # fmt: skip
NO_FINGERPRINT = "written by an older version (no settings fingerprint)"


class Study:
    """The clients, datasets and episodes of one run, and the record store."""

    def __init__(self, cfg: ICLConfig, http_client: Any | None = None):
        from cbm.vlm.client import ChatClient
        from cbm.vlm.config import ClientConfig

        self.cfg = cfg
        self.out = Path(cfg.output_dir)
        # the data and its episodes first: a bad file is refused before any client is set up
        self.datasets = {name: make_dataset(name, dict(spec), cfg.cache_dir, cfg.max_image_pixels) for name, spec in cfg.datasets.items()}
        self.episodes = {name: episodes_for(cfg, ds) for name, ds in self.datasets.items()}
        self.models = {name: ChatClient(ClientConfig.from_mapping(dict(s)), http_client=http_client) for name, s in cfg.models.items()}
        self.judge = ChatClient(ClientConfig.from_mapping(dict(cfg.judge)), http_client=http_client)
        self._ids = {name: digest(client_identity(c)) for name, c in self.models.items()}
        self._judge_id = digest(client_identity(self.judge))
        self._notes: dict[str, list[Path]] = {}

    def made_by(self, t: Trial) -> dict[str, str]:
        """What produced trial ``t``'s record, as digests (:data:`ANSWER_PARTS`, :data:`STAGE_PARTS`)."""
        p, ds, jo, c = self.cfg.prompts, self.datasets[t.dataset], self.cfg.judge_options, t.condition
        answer_prompts = {**{k: p[k] for k in ("system", "support_user", "support_assistant", "query")}, "instruction": p["instructions"][c]}
        return {"model": self._ids[t.model], "data": digest({"dataset": ds.fingerprint, "episode": t.episode.to_json()}),
                "prompts": digest(answer_prompts), "judge": self._judge_id,
                "judge_prompts": digest({"judge": p["judge"], "rubric": p["rubric"], "description": p["descriptions"][c],
                                         "support_images": jo.support_images}),
                "global_prompt": digest({"judge_global": p["judge_global"]}),
                "reproducibility": digest({"repeats": jo.reproducibility_repeats, "temperature": jo.reproducibility_temperature})}  # fmt: skip

    def trials(self) -> list[Trial]:
        return [Trial(m, d, c, ep) for m in self.models for d in self.datasets for c in self.cfg.conditions for ep in self.episodes[d]]

    def _path(self, trial: Trial) -> Path:  # names checked by ICLConfig; the episode id is read back from a file: slugged
        return inside(self.out, self.out / "records" / trial.model / trial.dataset / trial.condition / f"{slug(trial.episode.id)}.json", "ICL record")

    def _load(self, trial: Trial) -> dict[str, Any] | None:
        """The trial's saved record, rebuilt, or ``None`` (the trial is redone).

        A record is a resume point, not a source of truth: everything in it derives from the
        replies, which the client's reply cache returns again at no cost. So a record that cannot
        be trusted (unreadable, edited since written, for another trial, of the wrong shape) is
        treated as missing, with a warning, rather than refused; and a trusted one keeps only its
        reply texts, from which the parse, checker, features and judge scores are derived again
        (a record with a recomputed digest therefore cannot feed a wrong type or a forged verdict
        to the tables; the rebuilt record is written back when it differs).

        Settings changed since a record was made are also a redo, not a refusal: an ICL
        ``output_dir`` is meant to grow (another model, dataset or condition is added to the same
        tables), so a run is not sealed as a whole; instead each record carries ``made_by``
        (:meth:`made_by`). When the model's endpoint, model or sampling, the dataset or episode, or
        the answer prompts differ, the trial is redone; when only the judge's settings, prompts or
        options (or the reproducibility settings) differ, only that stage is redone. A record
        without a digest or without ``made_by`` was written by an older version and is redone.
        Each such reason is one log line per run (:meth:`_flush_notes`)."""
        path = self._path(trial)
        if not path.exists():
            return None
        try:
            saved, why = open_sealed(read_json(path))
        except ValueError as err:
            log.warning("icl: %s; the trial is redone", err)
            return None
        if why == OLDER:
            return self._note(f"{OLDER}: redone", path)
        if saved is not None and saved.get("trial") == trial.id and saved.get("status") == "error":
            return None  # the endpoint failed last time: asked again
        rec = rebuild_record(trial, saved)
        if rec is None:
            log.warning("icl: %s changed since it was written or is not this trial's record; the trial is redone", path)
            return None
        made = self.made_by(trial)
        old = saved.get("made_by")
        if not conforms(old, dict.fromkeys(made, str)):
            return self._note(f"{NO_FINGERPRINT}: redone", path)
        stale = [k for k in made if old[k] != made[k]]
        if changed := [k for k in stale if k in ANSWER_PARTS]:
            return self._note(f"made with other {_parts(changed, trial)}: redone", path)
        for key, parts in STAGE_PARTS.items():
            if key in rec and (changed := [k for k in parts if k in stale]):
                del rec[key]
                self._note(f"whose {key} was made with other {_parts(changed, trial)}: {key} redone", path)
        rec["made_by"] = made
        if rec != saved:  # what the tables use is what the file holds
            self._save(trial, rec)
        return rec

    def _note(self, reason: str, path: Path) -> None:
        self._notes.setdefault(reason, []).append(path)

    def _flush_notes(self) -> None:
        """One log line per reason records were redone (``icl: 26 trial record(s) made with other ...``)."""
        for reason, paths in self._notes.items():
            log.warning("icl: %d trial record(s) %s (e.g. %s)", len(paths), reason, paths[0])
        self._notes.clear()

    def _save(self, trial: Trial, rec: dict[str, Any]) -> None:
        write_json_atomic(self._path(trial), seal(rec))

    def _map(self, client: Any, requests: list[Messages], desc: str, **params: Any) -> list[Any]:
        return client.map(requests, progress=self.cfg.progress, desc=desc, **params) if requests else []

    def run_trials(self) -> list[dict[str, Any]]:
        """Every trial's record (answers, parse, checker, judge scores), resuming what is on disk."""
        trials = self.trials()
        recs: dict[str, dict[str, Any]] = {t.id: r for t in trials if (r := self._load(t)) is not None}
        self._flush_notes()
        # 1. the models' answers
        for name, client in self.models.items():
            todo = [t for t in trials if t.model == name and recs.get(t.id, {}).get("status") != "answered"]
            replies = self._map(client, [trial_messages(self.cfg, self.datasets[t.dataset], t) for t in todo], f"{name} answers")
            for t, rep in zip(todo, replies):
                recs[t.id] = self._answer_record(t, rep)
                self._save(t, recs[t.id])
            # 1b. one re-ask of an answer without a readable label
            again = [t for t in trials if t.model == name and recs[t.id].get("status") == "answered"
                     and recs[t.id]["parsed"]["response"] is None and "reask" not in recs[t.id]] if self.cfg.reask else []  # fmt: skip
            follow = [reask_messages(trial_messages(self.cfg, self.datasets[t.dataset], t), recs[t.id]["reply"], answer_problem(recs[t.id]))
                      for t in again]  # fmt: skip
            for t, rep in zip(again, self._map(client, follow, f"{name} re-asks")):
                if not isinstance(rep, ChatError):
                    recs[t.id] = {**answer_record(t, recs[t.id]["reply"], rep.text), "made_by": recs[t.id]["made_by"]}
                    self._save(t, recs[t.id])
        # 2. reproducibility reruns (sampled), 3. judge, 4. global discriminativeness
        jo = self.cfg.judge_options
        if jo.reproducibility_repeats:
            self._reproducibility(trials, recs)
        if jo.enabled:
            self._judge(trials, recs, "judge",
                        lambda t, r: judge_messages(self.cfg, self.datasets[t.dataset], t, r["output"], r["parsed"]["response"]))
            if jo.global_discriminativeness:
                self._judge(trials, recs, "judge_global",
                            lambda t, r: global_messages(self.cfg, self.datasets[t.dataset], t, r["output"], r["parsed"]["response"]),
                            metrics=(GLOBAL_METRIC,), need_response=True)  # fmt: skip
        return [recs[t.id] for t in trials]

    def _answer_record(self, t: Trial, reply: Any) -> dict[str, Any]:
        if isinstance(reply, ChatError):
            return {**record_base(t), "status": "error", "error": str(reply), "made_by": self.made_by(t)}
        return {**answer_record(t, reply.text), "made_by": self.made_by(t)}

    def _reproducibility(self, trials: list[Trial], recs: dict[str, dict[str, Any]]) -> None:
        jo = self.cfg.judge_options
        for name, client in self.models.items():
            todo = [t for t in trials if t.model == name and t.condition in ("E3", "E4", "E5") and recs[t.id].get("status") == "answered"
                    and "reproducibility" not in recs[t.id]]  # fmt: skip
            for r in range(jo.reproducibility_repeats):
                replies = self._map(client, [trial_messages(self.cfg, self.datasets[t.dataset], t) for t in todo], f"{name} rerun {r + 1}",
                                    temperature=jo.reproducibility_temperature, seed=r + 1)  # fmt: skip
                for t, rep in zip(todo, replies):
                    runs = recs[t.id].setdefault("_reruns", [])
                    if not isinstance(rep, ChatError):
                        runs.append(sorted(features_of(parse_reply(rep.text, t.condition, t.episode.labels)) or []))
            for t in todo:
                runs = recs[t.id].pop("_reruns", [])
                value = reproducibility([set(s) for s in runs])
                recs[t.id]["reproducibility"] = {"runs": runs, "jaccard": value}
                self._save(t, recs[t.id])

    def _judge(self, trials: list[Trial], recs: dict[str, dict[str, Any]], key: str, build: Any,
               metrics: Sequence[str] = METRICS, need_response: bool = False) -> None:  # fmt: skip
        todo = [t for t in trials if recs[t.id].get("status") == "answered" and not recs[t.id].get(key, {}).get("complete")
                and t.condition in self.cfg.judge_options.conditions and not refused(recs[t.id]["parsed"])
                and (not need_response or recs[t.id]["parsed"]["response"] is not None)]  # fmt: skip
        replies = self._map(self.judge, [build(t, recs[t.id]) for t in todo], key)
        for t, rep in zip(todo, replies):
            if isinstance(rep, ChatError):
                recs[t.id][key] = {"complete": False, "error": str(rep)}
            else:
                recs[t.id][key] = judged(rep.text, metrics)
            self._save(t, recs[t.id])
        # one re-ask of a reply without every score
        again = [t for t in todo if self.cfg.reask and "reply" in recs[t.id][key] and not recs[t.id][key]["complete"]]
        follow = [reask_messages(build(t, recs[t.id]), recs[t.id][key]["reply"],
                                 "; ".join(f"{m}: {e}" for m, e in recs[t.id][key]["errors"].items())) for t in again]  # fmt: skip
        for t, rep in zip(again, self._map(self.judge, follow, f"{key} re-asks")):
            if not isinstance(rep, ChatError):
                recs[t.id][key] = judged(recs[t.id][key]["reply"], metrics, rep.text)
                self._save(t, recs[t.id])

    def usage(self) -> dict[str, Any]:
        out = {name: {"model": c.model, **c.usage.to_json()} for name, c in self.models.items()}
        out["judge"] = {"model": self.judge.model, **self.judge.usage.to_json()}
        return out


def _parts(parts: list[str], t: Trial) -> str:
    """``["model", "prompts"]`` -> ``"models.vlm settings (...) and prompts"``."""
    names = [f"models.{t.model} {PART_NAMES[p].removeprefix('model ')}" if p == "model" else PART_NAMES[p] for p in parts]
    return " and ".join(names)


# ------------------------------------------------------------------ tables


def run(cfg: ICLConfig, http_client: Any | None = None) -> dict[str, Any]:
    out = Path(cfg.output_dir)
    human = read_human_scores(cfg.statistics.human_scores) if cfg.statistics.human_scores else None
    study = Study(cfg, http_client=http_client)
    records = study.run_trials()
    tables = {"accuracy": accuracy_rows(records), "parse_errors": parse_error_rows(records), "judge": judge_rows(records),
              "checker": checker_rows(records), "accuracy_by_model": accuracy_by(records, "model", cfg.conditions),
              "accuracy_by_dataset": accuracy_by(records, "dataset", cfg.conditions),
              "accuracy_by_nk": accuracy_nk_rows(records, cfg.conditions),
              "judge_by_condition": judge_by_condition_rows(records, cfg.conditions),
              "losses": loss_rows(records, cfg.judge_options.conditions if cfg.judge_options.enabled else [])}  # fmt: skip
    st = statistics(records, cfg.conditions, cfg.statistics.correction)
    st[SPEARMAN_KEY] = spearman_by_condition(records, cfg.conditions, cfg.statistics.correction)
    if human is not None:
        st["judge_vs_human"] = human_agreement(human, records)
    for name, rows in tables.items():
        write_csv_atomic(out / f"{name}.csv", rows, columns_of(rows))
        if name != "parse_errors":
            write_text_atomic(out / f"{name}.md", losses_md(rows) if name == "losses" else rows_md(rows))
    write_json_atomic(out / "stats.json", st)
    write_text_atomic(out / "stats.md", paper_tables_md(tables) + "\n## Re-asks and losses\n\n" + losses_md(tables["losses"]) + "\n"
                      + stats_md(st, cfg.statistics.correction))  # fmt: skip
    radar_chart(tables["judge"], out / "radar.png")
    result = {"trials": len(records), "episodes": {d: len(e) for d, e in study.episodes.items()},
              "status": {s: sum(r["status"] == s for r in records) for s in ("answered", "error")},
              "tables": tables, "usage": study.usage()}  # fmt: skip
    write_json_atomic(out / "results.json", result)
    return {"records": records, "tables": tables, "stats": st, "result": result}
