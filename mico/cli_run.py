"""``mico run CONFIG.yaml``: the whole pipeline from one config file (registered on mico's app)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mico.cli import ForceOpt, PreferOpt, _friendly_errors, app


@app.command("run")
@_friendly_errors
def run(
    config: Annotated[Path, typer.Argument(help="Run config (YAML): model, data, train, ...")],
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Run directory (default out/<name> of the config)."),
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Override the config's seed (data split, weights).")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the summary.")] = False,
    force: ForceOpt = False,
) -> None:
    """Run every stage a config describes (train, quantize, compile, verify) into one folder.

    Example: mico run examples/digits.yaml -o out/digits  (see docs/run.md for the format)
    """
    from mico.runconfig import load_run_config
    from mico.runner import run_config

    cfg = load_run_config(config)
    if seed is not None:
        cfg.seed = seed
    out_dir = out if out is not None else Path("out") / cfg.name
    result = run_config(cfg, out_dir, force=force, log=(lambda _m: None) if quiet else typer.echo)
    m = result.metrics
    typer.echo(
        f"{m['model']} {m['plan']}: FP32 {m['fp32_accuracy']:.4f}, C {m['c_accuracy']:.4f}; "
        f"report: {out_dir / 'report.md'}"
    )
    if not result.ok:
        typer.echo("error: the C program disagrees with the Python reference", err=True)
        raise typer.Exit(1)


@app.command("generate")
@_friendly_errors
def generate(
    model: Annotated[
        str | None, typer.Argument(help="A zoo language model (tinyllama), or use --checkpoint.")
    ] = None,
    checkpoint: Annotated[
        Path | None, typer.Option(help="A checkpoint of a language model (mico train).")
    ] = None,
    prompt: Annotated[str, typer.Option(help="The text to continue.")] = "Once upon a time",
    tokens: Annotated[int, typer.Option(help="How many tokens to generate.")] = 16,
    target: Annotated[
        str, typer.Option(help="Where the C generation loop runs: host, or rv32 (qemu).")
    ] = "host",
    top_k: Annotated[
        int, typer.Option(help="Sample among the K most likely tokens (1: greedy).")
    ] = 1,
    temperature: Annotated[float, typer.Option(help="Sampling temperature (0: greedy).")] = 1.0,
    sample_seed: Annotated[
        int, typer.Option(help="Seed of the sampler's integer generator (same in C).")
    ] = 0,
    seed: Annotated[int, typer.Option(help="Seed of an untrained zoo model's weights.")] = 0,
    max_prompt_bytes: Annotated[
        int, typer.Option(help="The longest prompt the C program takes (bytes; sizes its buffers).")
    ] = 512,
    kv_cache: Annotated[
        bool | None,
        typer.Option(
            "--kv-cache/--no-kv-cache",
            help="Decode one position per token from a KV cache (default: where the model "
            "allows: LLaMA layout, float layers).",
        ),
    ] = None,
    weights_file: Annotated[
        bool,
        typer.Option(
            "--weights-file",
            help="The program reads every weight from lm.bin at run time (none compiled in).",
        ),
    ] = False,
    mode: Annotated[
        str,
        typer.Option(
            help="dynamic (float scales at run time) or static (integer-only program; its KV "
            "cache holds codes). In static mode a model not yet quantized is quantized with "
            "--plan and calibrated on the prompt's window."
        ),
    ] = "dynamic",
    plan: Annotated[
        str | None,
        typer.Option(
            help="Bit-widths for a model not yet quantized, e.g. 8/8 or 4/8 (static mode: "
            "8/8 by default; dynamic mode: float layers unless given)."
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the texts.")] = False,
) -> None:
    """Generate text in Python and with a C program that runs the whole loop on the target
    (the prompt is encoded in C, from text read at run time); show both and where they part
    (if they do). Exits 1 when they differ.

    Example: mico generate --checkpoint out/llm/fp32.pt --prompt "Once upon a time" --tokens 32
    --top-k 8 --temperature 0.8 --target rv32
    """
    import torch

    from mico.errors import ConfigError
    from mico.generate import decode, tokenizer_for
    from mico.generate import generate as run_generation

    if (model is None) == (checkpoint is None):
        raise ConfigError("give a zoo model name or --checkpoint (one of them)")
    extra: dict = {}
    if checkpoint is not None:
        from mico.train.checkpoint import load_checkpoint, read_checkpoint

        net = load_checkpoint(checkpoint)
        extra = read_checkpoint(checkpoint).extra
    else:
        from mico.models import from_zoo

        torch.manual_seed(seed)
        net = from_zoo(model)
    from mico.sampling import Sampler

    sampler = Sampler(top_k, temperature, sample_seed)  # checked before any work
    tokenizer = tokenizer_for(net, extra)
    log = (lambda _m: None) if quiet else typer.echo
    if mode not in ("dynamic", "static"):
        raise ConfigError(f"--mode {mode!r}: choose dynamic or static")
    from mico.quant.model import bit_layers

    if not bit_layers(net) and (mode == "static" or plan is not None):
        _quantize_for_generation(net, plan or "8/8", mode, prompt, tokenizer, log)
    result = run_generation(
        net, prompt, tokens, target=target, log=log, sampler=sampler, tokenizer=tokenizer,
        max_prompt_bytes=max_prompt_bytes, kv_cache=kv_cache, weights_file=weights_file,
        mode=mode,
    )  # fmt: skip
    python_text = decode(tokenizer, result.python_ids)
    c_text = result.c_text.decode("utf-8", "replace")  # as the C program printed it
    typer.echo(f"prompt: {prompt!r}  ids {result.prompt_ids}")
    typer.echo(f"python: {python_text!r}  ids {result.python_ids}")
    typer.echo(f"C ({target}): {c_text!r}  ids {result.c_ids}")
    m = result.memory
    cache = (
        f"KV cache {m['kv_cache']} B + scratch {m['decode_scratch']} B "
        f"({'inside the arena' if m['kv_in_arena'] else 'beside the arena'})"
        if result.kv_cache
        else "no KV cache"
    )
    log(f"memory: arena {m['model_arena']} B, {cache}, prompt buffers {m['prompt_buffers']} B")
    if result.instructions:
        log(f"instructions per token on {target}: {result.instructions}")
    if not result.prompt_agrees:
        typer.echo(
            f"error: the C encoder gave the prompt ids {result.c_prompt_ids}, Python "
            f"{result.prompt_ids}",
            err=True,
        )
        raise typer.Exit(1)
    diff = result.first_difference
    if diff is None:
        typer.echo(f"the C program generated the same {tokens} tokens")
        return
    typer.echo(
        f"error: first difference at generated token {diff}: Python "
        f"{result.python_ids[diff] if diff < len(result.python_ids) else '-'}, C "
        f"{result.c_ids[diff] if diff < len(result.c_ids) else '-'}",
        err=True,
    )
    raise typer.Exit(1)


@app.command("tune")
@_friendly_errors
def tune(
    model: Annotated[
        str | None, typer.Argument(help="Zoo model or file.py:Class; or use --checkpoint.")
    ] = None,
    checkpoint: Annotated[
        Path | None, typer.Option(help="A trained checkpoint (fp32.pt of mico train).")
    ] = None,
    model_args: Annotated[
        str | None,
        typer.Option(
            help="Constructor arguments of a file's model: JSON object or YAML/JSON file."
        ),
    ] = None,
    input_shape: Annotated[
        str | None,
        typer.Option(help="One sample's shape for a model from a file, e.g. 3,32,32 (no batch)."),
    ] = None,
    budget: Annotated[
        str,
        typer.Option(
            help="Budgets: bops=50%, size=4KB (the C constants), flash=128KiB (the whole rv32 "
            "program: constants, kernel code, runtime), macs=1M, latency=80% (BitFusion), "
            "ram=1KB (the C arena), ram_total=32KiB (the rv32 program's RAM: arena, static "
            "data, stack bound). The first one is the searcher's."
        ),
    ] = "bops=50%",
    strategy: Annotated[
        str,
        typer.Option(help="Search strategy: nlp, random, mico, bayes, haq, regression, pareto."),
    ] = "nlp",
    trials: Annotated[
        int,
        typer.Option(
            min=1, max=10_000, help="Most trials the study finishes (all workers, resumes)."
        ),
    ] = 10,
    objective: Annotated[
        str,
        typer.Option(
            help="What a trial measures: ptq_acc (calibrate, test) or qat_acc (calibrate, "
            "fine-tune --qat-epochs, test)."
        ),
    ] = "ptq_acc",
    qat_epochs: Annotated[
        int, typer.Option(min=1, max=1000, help="qat_acc: fine-tuning epochs per trial.")
    ] = 1,
    qat_lr: Annotated[
        float, typer.Option(min=0.0, help="qat_acc: fine-tuning learning rate.")
    ] = 1e-4,
    bits: Annotated[
        str,
        typer.Option(
            help="Bit-widths to choose from, e.g. 2,4,8, each one the target runs (the latency "
            "target under a latency budget, else the host); 'target': every width it runs."
        ),
    ] = "2,4,8",
    space: Annotated[
        str | None,
        typer.Option(
            help="Search space (seed 003's DimTransform): full, w-only[:A] (activations held "
            "at A bits), w=a, blocks:K[:w=a] (K blocks of layers share widths). Default: the "
            "strategy's own (w=a for nlp, full for the others)."
        ),
    ] = None,
    fixed_layers: Annotated[
        str | None,
        typer.Option(
            help="Layers held at widths, not searched: first=8,last=8/8 or by name or "
            "index (conv1=4/8, -1=8)."
        ),
    ] = None,
    latency_target: Annotated[
        str,
        typer.Option(
            "--latency-target",
            "--target",
            help="What a latency budget measures: bitfusion (cycle model), rv32 (qemu "
            "instructions), host (callgrind instructions) or vexriscv (RTL cycles).",
        ),
    ] = "bitfusion",
    latency_mode: Annotated[
        str,
        typer.Option(help="measured (run the scheme's C) or proxy (the target's fitted proxy)."),
    ] = "measured",
    prefer: PreferOpt = "speed",
    epochs: Annotated[int, typer.Option(min=0, max=10_000, help="FP32 training first.")] = 5,
    dataset: Annotated[str | None, typer.Option(help="Data set (default: the model's).")] = None,
    seed: Annotated[int, typer.Option(min=0, max=2**32 - 1, help="Seed of data and search.")] = 0,
    out: Annotated[Path, typer.Option("--out", "-o", help="Run directory.")] = Path("out/tune"),
    storage: Annotated[
        str | None,
        typer.Option(
            help="Study database URL (default: sqlite study.db in the run directory), e.g. "
            "postgresql+psycopg://user@host/db."
        ),
    ] = None,
    study_name: Annotated[
        str | None, typer.Option("--study", help="Study name (default: the run folder's name).")
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the run's study; finished trials stay.")
    ] = False,
    workers: Annotated[
        int, typer.Option(min=1, max=64, help="Worker processes sharing the study.")
    ] = 1,
    heartbeat: Annotated[
        int,
        typer.Option(
            min=1,
            max=3600,
            help="Seconds between heartbeats; a trial silent for twice as "
            "long is failed and retried.",
        ),
    ] = 10,
    cache: Annotated[
        Path | None,
        typer.Option(
            help="Evaluation cache (SQLite; default $MICO_CACHE or ~/.cache/mico/"
            "evaluations.sqlite)."
        ),
    ] = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Evaluate every scheme, keep nothing.")
    ] = False,
    compile_best: Annotated[
        bool,
        typer.Option(
            "--compile/--no-compile", help="Compile the best plan to C and verify it on the host."
        ),
    ] = True,
    accuracy_samples: Annotated[
        int,
        typer.Option(
            min=0,
            help="Test samples the best plan's C program runs to measure its accuracy "
            "(0: the whole test set).",
        ),
    ] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the summary.")] = False,
    force: ForceOpt = False,
) -> None:
    """Search per-layer bit-widths under budgets and write the best plan (best_plan.yaml).

    Every evaluation is a trial of one Optuna study (study.db in the run directory, or
    --storage); --resume continues it and --workers runs several processes on it. The run
    directory also gets trials.csv, report.md/json, trajectory.png, pareto.png, bits.png and
    c/ (the best plan's C project, verified on the host).

    Example: mico tune small_cnn --budget bops=50%,size=1KB --strategy nlp -o out/tune
    """
    import numpy as np

    from mico.atomic import _target_lock, atomic_directory, check_output_dir, is_mico_output
    from mico.data import load_dataset
    from mico.errors import ConfigError, PlanError
    from mico.search import MiCoEval
    from mico.search.cache import EvalCache, default_cache_path
    from mico.search.study import STUDY_FILE, StudyConfig, WorkerSpec, sqlite_url
    from mico.search.tune import compile_best as compile_plan
    from mico.search.tune import parse_budgets, write_run
    from mico.search.tune import tune as run_tune
    from mico.train.checkpoint import load_checkpoint
    from mico.train.loop import seed_everything

    log = (lambda _m: None) if quiet else typer.echo
    budgets = parse_budgets(budget)
    from mico.search.evaluator import OBJECTIVES

    if objective not in OBJECTIVES:
        raise PlanError(f"--objective {objective!r}: choose one of {', '.join(OBJECTIVES)}")
    from mico.search.strategies import STRATEGIES

    if strategy not in STRATEGIES:
        raise PlanError(
            f"unknown strategy {strategy!r}; choose one of: {', '.join(sorted(STRATEGIES))}"
        )
    qtypes = _search_widths(bits, latency_target if any(b.cost == "latency" for b in budgets)
                            else "host")  # fmt: skip
    final = check_output_dir(out, force=force)
    from mico.models.resolve import is_model_spec

    file_model = model is not None and is_model_spec(model) and not model.endswith(".pt2")
    if (model is None) == (checkpoint is None) and not (file_model and checkpoint is not None):
        raise ConfigError(
            "give a model (zoo name or file.py:Class) or --checkpoint (one of them; a model "
            "from a file is named beside its checkpoint)"
        )
    weights = final / "fp32.pt"
    if not resume and not force and (final / STUDY_FILE).is_file() and is_mico_output(final):
        raise ConfigError(
            f"{final} holds the study of an earlier run ({STUDY_FILE}); continue it with "
            "--resume, or start over with --force (its trials are then deleted)"
        )
    if resume and not (is_mico_output(final) and weights.is_file()):
        raise ConfigError(
            f"--resume: {final} is not a mico tune run directory (no fp32.pt); run without "
            "--resume first"
        )
    seed_everything(seed)
    from mico.models.resolve import resolve_model

    if checkpoint is not None and file_model:
        from mico.train.checkpoint import load_file_model_checkpoint

        net = load_file_model_checkpoint(checkpoint, model, model_args, input_shape)
        zoo = None
    elif checkpoint is not None:
        net = load_checkpoint(checkpoint)
        zoo = getattr(net, "zoo_name", None)
    else:
        net, zoo = resolve_model(model, model_args, input_shape)
    from mico.models import zoo_entry

    name = dataset or (zoo_entry(zoo).dataset if zoo else "synthetic")
    split = load_dataset(name, seed=seed)
    shape = tuple(getattr(net, "default_input_shape", ()))
    if tuple(split.input_shape) != shape:
        raise ConfigError(
            f"the model takes samples of shape {shape} but dataset '{name}' gives "
            f"{tuple(split.input_shape)}; pick one with --dataset"
        )
    train_loader, test_loader = split.loaders(64, seed=seed)
    latency = {"latency_target": latency_target, "latency_mode": latency_mode, "prefer": prefer}
    probe = MiCoEval(net, 1, train_loader, test_loader, None, **latency)
    from mico.search.tune import parse_fixed_layers, parse_space
    from mico.search.tune import searcher as make_searcher

    held = parse_fixed_layers(fixed_layers, probe.layer_names) if fixed_layers else None
    if space is not None:
        parse_space(space, probe.n_layers)  # a bad space is refused before any training
    checker = make_searcher(probe, "random", qtypes, seed, space, held)
    if any(b.cost == "latency" for b in budgets):
        probe.check_latency_falls_with_bits(qtypes)
    for cost in ("flash", "ram_total"):  # kernel code / stack can make fewer bits cost more
        if any(b.cost == cost for b in budgets):
            probe.check_cost_falls_with_bits(cost, qtypes)
    for b in budgets:  # impossible budgets: refused before any training
        checker._check_budget(b.cost, b.resolve(checker.cost([8] * 2 * probe.n_layers, b.cost)))
    if not resume:  # a fresh run directory (a former mico output there is replaced)
        with atomic_directory(final, force=force, command="mico tune"):
            pass
    with _target_lock(final):  # one writer of the run directory; its workers share the study
        if not resume:
            if checkpoint is None and epochs:
                log(f"training {type(net).__name__} on {name} for {epochs} epoch(s)")
                net.train_loop(epochs, train_loader, lr=3e-3, verbose=False)
            _save_weights(net, weights, name)
        model_name = model or zoo or type(net).__name__
        store = None if no_cache else EvalCache(cache or default_cache_path())
        extra = {"data_name": f"{name}:seed={seed}", "model_name": model_name, **latency}
        # fresh loaders: the calibration batches are the first shuffle of the seed, as in workers
        train_loader, test_loader = split.loaders(64, seed=seed)
        extra.update(objective=objective, lr=qat_lr)
        evaluator = MiCoEval(net, qat_epochs, train_loader, test_loader, weights, cache=store,
                             **extra)  # fmt: skip
        config = StudyConfig(
            storage or sqlite_url(final / STUDY_FILE), study_name or final.name, heartbeat
        )
        spec = WorkerSpec(config, str(weights), model, name, seed, strategy, qtypes, {}, "",
                          trials, None if store is None else str(store.path),
                          {**extra, "epochs": qat_epochs}, quiet)  # fmt: skip
        try:
            result = run_tune(evaluator, budgets, strategy, trials, qtypes, seed, log,
                              study=config, resume=resume, workers=workers, spec=spec,
                              space=space, fixed_layers=held)  # fmt: skip
        except KeyboardInterrupt:
            typer.echo(
                f"interrupted: study '{config.name}' keeps every finished trial; continue "
                f"with: mico tune ... -o {out} --resume",
                err=True,
            )
            raise typer.Exit(130) from None
        if compile_best:
            count = len(split.x_test) if accuracy_samples == 0 else accuracy_samples
            samples = np.asarray(split.x_test[:count], dtype=np.float32)
            labels = np.asarray(split.y_test[:count])
            result.verification = compile_plan(
                evaluator, result.best_scheme, final / "c", samples, log, labels=labels
            )
        write_run(result, evaluator.layer_names, final)
    costs = ", ".join(f"{k} {v:g} (budget {result.budgets[k]:g})" for k, v in result.costs.items())
    typer.echo(
        f"best plan: accuracy {result.best_accuracy:.4f}; {costs}; {final / 'best_plan.yaml'}"
    )
    v = result.verification
    if v is not None:
        same = "identical to" if v["exact"] == v["samples"] else "differs from"
        accuracy = f"; C accuracy {v['c_accuracy']:.4f}" if "c_accuracy" in v else ""
        typer.echo(
            f"C project {final / 'c'} ({v['mode']}): {same} the Python reference on the host "
            f"({v['exact']}/{v['samples']} samples bit-exact){accuracy}"
        )
        if not v["ok"]:
            raise typer.Exit(1)


def _search_widths(bits: str, device: str) -> list[int]:
    """The widths ``--bits`` names, each one ``device`` runs for weights and activations (its
    target file says which); ``target``: all of those."""
    from mico.errors import PlanError
    from mico.targets.catalog import get_target

    spec = get_target(device)
    runs = [int(b) for b in spec.weight_bits if float(b).is_integer() and b in spec.activation_bits]
    if bits.strip().lower() == "target":
        return runs
    try:
        qtypes = sorted({int(b) for b in bits.split(",") if b.strip()})
    except ValueError:
        raise PlanError(f"--bits {bits!r} must be integers from 1 to 8, e.g. 2,4,8") from None
    if not qtypes or qtypes[0] < 1 or qtypes[-1] > 8:
        raise PlanError(f"--bits {bits!r} must be integers from 1 to 8, e.g. 2,4,8")
    missing = [q for q in qtypes if q not in runs]
    if missing:
        raise PlanError(
            f"--bits {bits}: target '{device}' does not run {', '.join(map(str, missing))}-bit "
            f"weights and activations (it runs {', '.join(map(str, runs))}; see mico targets); "
            "choose among those or --bits target"
        )
    return qtypes


def _quantize_for_generation(net: object, plan: str, mode: str, prompt: str,
                             tokenizer: object, log: object) -> None:  # fmt: skip
    """A float language model quantized with ``plan`` for ``mode``; in static mode calibrated
    on the prompt's window (the only text at hand: a model trained by ``mico train`` carries
    scales calibrated on its data)."""
    import torch

    from mico.codegen.compile import token_vocabulary
    from mico.generate import _window, check_prompt, prompt_bytes
    from mico.quant import QuantConfig, calibrate, quantize_model

    vocab = token_vocabulary(net)
    if vocab is None:
        return  # not a language model: mico generate says so
    quantize_model(net, plan, QuantConfig(act_mode=mode))
    if mode == "static":
        seq_len = int(net.default_input_shape[-1])  # type: ignore[attr-defined]
        ids = check_prompt(prompt_bytes(prompt), tokenizer, vocab, 1 << 20)  # type: ignore[arg-type]
        window = torch.from_numpy(_window(ids, seq_len)[0]).long()
        calibrate(net, [window])  # type: ignore[arg-type]
    log(
        f"quantized {plan} ({mode} mode)"  # type: ignore[operator]
        + (", static scales calibrated on the prompt's window" if mode == "static" else "")
    )


def _save_weights(net: object, path: Path, dataset: str) -> None:
    """The FP32 weights of the run (a mico checkpoint, else a state dict), written atomically."""
    import torch

    from mico.train.checkpoint import save_checkpoint

    tmp = path.with_name(f".{path.name}.tmp")
    if hasattr(net, "save"):
        save_checkpoint(net, tmp, dataset=dataset)
    else:
        torch.save(net.state_dict(), tmp)  # type: ignore[attr-defined]
    tmp.replace(path)
