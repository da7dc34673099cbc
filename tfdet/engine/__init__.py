"""Training engine pieces that do not depend on the detector: optimizer, LR schedule, checkpoints,
strategies and training statistics, and the training loop (`trainer`) that puts them together.

| module | what it gives |
|---|---|
| `lr_schedule` | `lr_at_iter(cfg, it)` (Detectron's get_lr_at_iter), `DetectronLRSchedule.from_cfg(cfg)` (the same in TF) |
| `optimizer` | `build_optimizer(cfg, model)` -> `DetectronSGD` (Detectron's momentum SGD, bias/GN rules, momentum correction) |
| `checkpoint` | `TrainingCheckpointer` (save / restore_latest; refuses non-finite weights), `check_finite_losses`, `is_snapshot_iteration` |
| `strategy` | `build_strategy(cfg)`, `make_logical_cpus(n)`, `scale_replica_loss`, `replica_mean`, `global_batch_size`, `is_chief` |
| `metrics_log` | `TrainingStats`: json_stats lines, metrics.json, TensorBoard scalars, tqdm bar |
| `weights` | TRAIN.WEIGHTS in (`load_initial_weights`: .pkl, .weights.h5 or checkpoint, with class transfer; `copy_initial_weights`), `export_final_weights` out |
| `trainer` | `Trainer(cfg)`: `initialize()` (auto-resume, TRAIN.WEIGHTS), `train()` to SOLVER.MAX_ITER; `python -m tfdet.train` drives it |
"""
