"""The learner: rounds of a method's updates on the actor's episodes, each exported, checked and deployed as a version.

A round waits until the dataset holds ``episodes_per_round`` new committed episodes of the version deployed last,
runs the method's update on every episode so far (a `policies.rl.rounds.RoundUpdate`: HABC's
`policies.rl.habc.HabcRound`, RL-100's `policies.rl.rl100.Rl100Round`), exports the result for the actor (the
policy's sampler unrolled to its sampling steps), checks onnxruntime against torch on recorded observations and
publishes it (`deploy.policy_store`): a version over the parity tolerance, or an update that diverged, is recorded as
rejected and the actor keeps the last good one. An update may also deploy nothing (RL-100's offline evaluation
accepted no candidate): the actor then runs the same version for another round's worth of episodes. Each round
appends a row to ``rounds.jsonl`` (the deployed versions' success, interventions per episode, episode and robot time,
the update's numbers, the verdict), redraws ``rounds.png`` and logs to TensorBoard. When the rounds are done (and the
last version has run its episodes) it tells the actor through the store (`PolicyStore.finish`), and the actor stops.

Resumable: the learner's state (``learner.json``: last round, its checkpoint) is replaced atomically after each
round; a learner killed after publishing but before saving finds its version in the store (the record names the
round and the checkpoint) and goes on from there, so no round is trained or deployed twice. How many episodes a
round waits for is derived from the round log, so a restart neither re-collects nor counts an episode twice.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from torch.utils.tensorboard import SummaryWriter

from deploy.onnx_export import export_verified_generator
from deploy.policy_store import PolicyStore, PolicyStoreError, PolicyVersion
from policies.imitation import load_generative, observation_windows
from policies.rl.chain import ChainConfig
from policies.rl.rounds import (
    RoundOutcome,
    RoundUpdate,
    append_round,
    ended_under_intervention,
    plot_rounds,
    read_rounds,
    version_stats,
)
from reflexlab.dataset import INFO_PATH, load_dataset
from reflexlab.io import write_json_atomically

STATE = "learner.json"
ROUND_LOG = "rounds.jsonl"


@dataclass
class LearnerOptions:
    """What the learner does each round.

    Attributes:
        rounds: rounds to run (the initial policy is round 0).
        episodes_per_round: committed episodes of the deployed version a round waits for.
        demos: a dataset whose observation histories check each export (the SFT demonstrations).
        sampling_steps: the deployed policy's sampler steps (DDIM / Euler), unrolled in its ONNX file.
        parity_tolerance: max |onnxruntime − torch| over the checked chunks (an unrolled sampler compounds float32
            rounding: see `deploy.onnx_export.export_verified_generator`).
        poll_s: how often to look for new episodes.
        update: the method's round update (e.g. `policies.rl.habc.HabcRound`).
        evaluate_final: after the last round, wait for ``episodes_per_round`` episodes of the last version and log
            them as a final row (``verdict: final``), so the log says how the policy the rounds ended with does.
        paced: ask the actor for exactly the episodes each round waits for (`PolicyStore.want`), so that the robot
            time a method uses is its rounds' budget; False: the actor collects without pause while the learner
            trains (asynchronous, as FastRLAP's actor).
        chain: export every multi-step version as `policies.rl.chain.ChainSampler` of this chain, so that the
            actor records each chunk's denoising noise (`real.record.NOISE_COLUMN`): RL-100 with online rounds.
        explore_rounds: the rounds whose update trains on the chains the deployed version ran (RL-100's online
            rounds): the version deployed before each is exported exploring (the stochastic chain), all others
            deterministic (DDIM η = 0 through the same inputs). A round that must explore but finds a deterministic
            version deployed (the round before deployed nothing) publishes that version again, exploring. If the
            store refuses that export (parity), the learner stops with the store's error rather than spend a round
            of robot time on chains it cannot train on; the actor goes on serving the deployed version.
    """

    rounds: int
    episodes_per_round: int
    demos: Path
    update: RoundUpdate
    sampling_steps: int = 10
    parity_tolerance: float = 2e-3
    poll_s: float = 1.0
    evaluate_final: bool = True
    paced: bool = True
    chain: ChainConfig | None = None
    explore_rounds: frozenset[int] = frozenset()


def run_learner(
    dataset: Path,
    store: PolicyStore,
    run_dir: Path,
    initial: Path,
    options: LearnerOptions,
    *,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> list[dict[str, Any]]:
    """Run the rounds not yet done; returns the whole round log."""
    run_dir.mkdir(parents=True, exist_ok=True)
    state = _load_state(run_dir, initial)
    store.reopen()  # an actor stopped by an earlier finish is started again for these rounds
    store.want(_committed_episodes(dataset) if options.paced else None)  # paced: nothing more until a round asks
    if not store.versions():
        version = _deploy(store, Path(state["checkpoint"]), run_dir / "round_000", 0, options, {})
        log(f"learner: deployed the initial policy as version {version.version}")
    with SummaryWriter(log_dir=str(run_dir / "tensorboard")) as board:
        for round_ in range(int(state["round"]) + 1, options.rounds + 1):
            deployed = store.versions()[-1]
            if deployed.round == round_:  # published before a crash, not yet saved: adopt it
                state = {"round": round_, "checkpoint": deployed.record["checkpoint"]}
                write_json_atomically(run_dir / STATE, state)
                continue
            if any(r.get("round") == round_ for r in read_rounds(run_dir / ROUND_LOG)):  # logged, not yet saved
                write_json_atomically(run_dir / STATE, state := {"round": round_, "checkpoint": state["checkpoint"]})
                continue
            if round_ in options.explore_rounds and not deployed.record.get("exploring"):
                out = run_dir / f"round_{round_ - 1:03d}" / "exploring"
                info = {"republished": deployed.version}
                deployed = _deploy(store, Path(state["checkpoint"]), out, deployed.round, options, info, explore=True)
                log(f"learner: round {round_} trains on explored chains: version {deployed.version} explores")
            _wait_for_episodes(dataset, store, run_dir, deployed.version, options, log)
            row = _round(dataset, store, run_dir, Path(state["checkpoint"]), round_, deployed, options)
            append_round(run_dir / ROUND_LOG, row)
            for key, value in row["evaluated"].items():
                if isinstance(value, float | int):
                    board.add_scalar(f"round/{key}", value, round_)
            if row["verdict"] == "deployed":
                state = {"round": round_, "checkpoint": row["checkpoint"]}
            else:
                state = {"round": round_, "checkpoint": state["checkpoint"]}
            write_json_atomically(run_dir / STATE, state)
            log(f"learner: round {round_}: {row['verdict']} {row.get('version', '')} {row.get('reason', '')}".strip())
            if row.get("ended_under_intervention"):
                log(
                    f"learner: episodes {row['ended_under_intervention']} of version {deployed.version} ended with the "
                    "person in command (never handed back): policy steps before it credited as a takeover "
                    "(policies.rl.credit), the person's kept as demonstrations"
                )
        final = store.versions()[-1]
        if options.evaluate_final and not any(
            r.get("evaluated", {}).get("version") == final.version for r in read_rounds(run_dir / ROUND_LOG)
        ):
            _wait_for_episodes(dataset, store, run_dir, final.version, options, log)
            evaluated = asdict(version_stats(load_dataset(dataset))[final.version])
            append_round(run_dir / ROUND_LOG, {"round": options.rounds + 1, "evaluated": evaluated, "verdict": "final"})
    stats = version_stats(load_dataset(dataset))
    if stats:
        plot_rounds(stats, run_dir / "rounds.png")
    store.finish({"rounds": options.rounds, "final_version": store.versions()[-1].version})
    return read_rounds(run_dir / ROUND_LOG)


def _round(
    dataset: Path,
    store: PolicyStore,
    run_dir: Path,
    checkpoint: Path,
    round_: int,
    deployed: PolicyVersion,
    options: LearnerOptions,
) -> dict[str, Any]:
    """Update, export, publish; the row for the round log (the verdict says whether a version was deployed)."""
    ds = load_dataset(dataset)
    stats = version_stats(ds)
    evaluated = asdict(stats[deployed.version])
    row: dict[str, Any] = {
        "round": round_,
        "evaluated": evaluated,  # how the version deployed for this round did on the robot
        "ended_under_intervention": ended_under_intervention(ds, deployed.version),
        "robot_time_s": sum(s.robot_time_s for s in stats.values()),
        "time_unix": time.time(),
    }
    out = run_dir / f"round_{round_:03d}"
    try:
        outcome: RoundOutcome = options.update(dataset, checkpoint, out, round_)
    except FloatingPointError as err:  # a diverged critic or fine-tune: nothing to deploy, the actor keeps its version
        return {**row, "verdict": "rejected", "reason": f"round {round_}: update failed: {err}"}
    row |= {"stage": outcome.stage, "update": outcome.numbers}
    if outcome.checkpoint is None:
        return {**row, "verdict": "kept", "reason": f"round {round_}: {outcome.reason}"}
    try:
        info = {"update": outcome.numbers}
        version = _deploy(store, outcome.checkpoint, out, round_, options, info, outcome.sampling_steps)
    except PolicyStoreError as err:
        return {**row, "verdict": "rejected", "reason": str(err)}
    return {**row, "verdict": "deployed", "version": version.version, "checkpoint": str(outcome.checkpoint)}


def _deploy(
    store: PolicyStore,
    checkpoint: Path,
    out: Path,
    round_: int,
    options: LearnerOptions,
    info: dict[str, Any],
    sampling_steps: int | None = None,
    explore: bool | None = None,
) -> PolicyVersion:
    """Export ``checkpoint`` unrolled, measure its parity on the demos' observation histories, publish it.

    With ``options.chain`` a multi-step version is a chain sampler, exploring when ``explore`` (default: when the
    next round trains on its chains)."""
    policy, spec, extra, path = load_generative(checkpoint)
    obs, images = observation_windows(options.demos, spec, 64)
    steps = sampling_steps or options.sampling_steps
    chain = options.chain if steps > 1 else None
    explore = (round_ + 1 in options.explore_rounds if explore is None else explore) and chain is not None
    out.mkdir(parents=True, exist_ok=True)
    # the store judges parity against its tolerance, so the exporter only measures it
    report = export_verified_generator(
        policy, spec, extra, path, out / "policy.onnx", obs, images, steps,
        tolerance=math.inf, sampler_tolerance=math.inf, chain=chain, explore=explore,
    )  # fmt: skip
    return store.publish(
        out / "policy.onnx",
        round=round_,
        parity_error=report["max_abs_error"],
        tolerance=options.parity_tolerance,
        info={**info, "checkpoint": str(checkpoint), "sampling_steps": report["sampling_steps"], "exploring": explore},
    )


def _episodes_needed(run_dir: Path, version: int, options: LearnerOptions) -> int:
    """Episodes of ``version`` a round waits for: a round's worth more than the rounds that already evaluated it used
    (one unless rounds kept it deployed), counted from the round log so that a restarted learner agrees."""
    used = sum(1 for r in read_rounds(run_dir / ROUND_LOG) if r.get("evaluated", {}).get("version") == version)
    return options.episodes_per_round * (used + 1)


def _wait_for_episodes(
    dataset: Path,
    store: PolicyStore,
    run_dir: Path,
    version: int,
    options: LearnerOptions,
    log: Callable[[str], None],
) -> None:
    needed = _episodes_needed(run_dir, version, options)
    if options.paced:  # the other versions' episodes stay as they are; this one's run up to what the round needs
        stats = version_stats(load_dataset(dataset)) if _committed_episodes(dataset) > 0 else {}
        others = sum(s.episodes for v, s in stats.items() if v != version)
        store.want(others + needed)
    said, seen = False, -1
    while True:
        committed = _committed_episodes(dataset)
        if committed != seen:  # read and validate the episodes only when the actor has committed new ones
            seen = committed
            ran = version_stats(load_dataset(dataset)).get(version) if committed > 0 else None
            if ran is not None and ran.episodes >= needed:
                return
        if not said:
            log(f"learner: waiting for {needed} episodes of version {version}")
            said = True
        time.sleep(options.poll_s)


def _committed_episodes(dataset: Path) -> int:
    """info.json's episode count (its rename is the writer's commit point); 0 before the actor created the dataset."""
    try:
        return int(json.loads((dataset / INFO_PATH).read_text())["total_episodes"])
    except (OSError, ValueError, KeyError):
        return 0


def _load_state(run_dir: Path, initial: Path) -> dict[str, Any]:
    path = run_dir / STATE
    if path.exists():
        return json.loads(path.read_text())
    return {"round": 0, "checkpoint": str(initial)}
