"""The bad-input corpus of the model commands (cbm-train, cbm-intervene, cbm-automate, cbm-data,
cbm-report); the harness and the refusal contract are in ``badinput.py``, the other commands'
corpora in ``test_bad_inputs_*.py``. Inputs that fail before any heavy import run in the default
suite; those that need a trained model loaded are marked slow.
"""

from __future__ import annotations

import importlib
import pickle
from pathlib import Path

import pytest
import torch
from badinput import DATA, SLOW, Payload, assert_refused, params

TRAIN = [
    ("model=cbmm", "unknown model 'cbmm' (choose from: blackbox, blackbox_sudoku, blackbox_v04, cbm"),
    ("data=robt", "unknown data 'robt'"),
    ("model.monotonicity={knees: 3}", "model.monotonicity: signs must be +1 or -1"),
    ("trainer=nope", "unknown trainer 'nope'"),
    ("logger=nope", "unknown logger 'nope'"),
    ("logger.wandb.mode=sometimes", "logger.wandb.mode must be offline, online or disabled"),
    ("logger.wandb.project=team/cbm", "logger.wandb.project must be a plain name"),
    ("logger.wandb.entity=a/b", "logger.wandb.entity must be a plain name of at most 128 characters (no / \\ # ? % :), got 'a/b'"),
    (f"logger.wandb.tags=[{'t' * 70}]", "logger.wandb.tags: a tag must be 1 to 64 characters (W&B's limit), got 70: 'tttttttttttttttttttt...'"),
    ("logger.wandb.tags=[ok,'']", "logger.wandb.tags: a tag must be 1 to 64 characters (W&B's limit), got 0: ''"),
    ("logger.wandb.log_model=maybe", "log_model"),
    ("objective=val/f1", "objective must be one of"),
    ("hydra.sweeper.params={seed:'0,1'}", "the basic sweeper's params are added with '+'"),
    ("data.foo=1", "unknown key 'data.foo' (data has: blur"),
    ("foo=bar", "unknown key 'foo'"),
    ("model.lr=1", "unknown key 'model.lr'"),
    ("+foo=1", "Key 'foo' not in 'TrainConfig'"),
    ("model=[cbm", "bad override"),
    ("seed", "bad override"),
    ("trainer.max_epochs=0", "trainer.max_epochs must be >= 1"),
    ("trainer.max_epochs=ten", "max_epochs"),
    ("trainer.devices=-3", "trainer.devices must be a count >= 1"),
    ("trainer.devices=abc", "trainer.devices"),
    ("trainer.num_nodes=0", "trainer.num_nodes"),
    ("trainer.accelerator=tpu", "trainer.accelerator must be"),
    ("trainer.precision=8", "trainer.precision must be one of"),
    ("trainer.strategy=magic", "trainer.strategy must be one of"),
    ("trainer.gradient_clip_val=-1", "trainer.gradient_clip_val must be >= 0"),
    ("trainer.log_every_n_steps=0", "trainer.log_every_n_steps"),
    ("trainer.enable_progress_bar=maybe", "trainer.enable_progress_bar"),
    ("trainer.early_stopping_patience=-1", "early_stopping_patience"),
    ("trainer.early_stopping_min_delta=-0.1", "early_stopping_min_delta"),
    ("trainer.early_stopping_min_delta=1.5", "early_stopping_min_delta"),
    ("trainer.limit_train_batches=0", "trainer.limit_train_batches must be a fraction in (0, 1] or a batch count >= 1, got 0"),
    ("trainer.limit_val_batches=1.5", "trainer.limit_val_batches must be a fraction"),
    ("seed=-1", "seed must be in [0, 2**32)"),
    ("seed=abc", "seed"),
    ("batch_size=0", "batch_size"),
    ("eval_batch_size=-5", "batch_size"),
    ("interventions.ks=[-1]", "interventions.ks"),
    ("interventions.seed=-2", "interventions.seed"),
    ("interventions.ks=[max,max]", "interventions.ks lists the budget 'max' twice, got ['max', 'max'] (each budget once)"),
    ("data.n_train=0", "the train split is empty"),
    ("data.val_fraction=1.0", "the train split is empty"),
    ("data.val_fraction=1.5", "val_fraction"),
    ("data.n_test=0", "the test split is empty"),
    ("data.n_train=-5", "n_train"),
    ("data.image_size=4", "image_size"),
    ("data.modality=audio", "modality"),
    ("data.concept_set=nope", "unknown concept_set 'nope'"),
    ("data.concept_set=FX/files/missing.yaml", "concept-set file not found"),
    ("data.concept_set=FX/files/malformed.yaml", "not valid YAML at line"),
    ("data.concept_set=FX/files/list.yaml", "expected a mapping with a non-empty 'concepts' list"),
    ("data.concept_set=FX/files/noexpr.yaml", "needs 'name' and 'expr'"),
    ("data.concept_set=FX/files/badexpr.yaml", "concept 'x'"),
    ("data.concept_set=FX/files/overlap.yaml", "categorical concept 'foot': more than one of its values holds for"),
    ("data.concept_set=FX/files/outside.yaml", "continuous concept 'hands' (hand_subtype) must lie in [0, 1]"),
    ("data.concept_set=FX/files/ordinal.yaml", "kind must be one of ['binary', 'categorical', 'continuous'], got 'ordinal'"),
    ("data.concept_noise=0.9", "concept_noise"),
    ("data.concept_noise={nope: 0.1}", "unknown concept(s) ['nope']"),
    ("data.occlude=[wings]", "occlude"),
    ("data.seed=-1", "RobotConfig.seed: expected an integer >= 0, got -1"),
    ("data.cue.kind=stripes", "RobotConfig.cue.kind: must be one of ['none', 'corner', 'swatch', 'tint'], got 'stripes'"),
    ("data.cue.correlation=1.5", "RobotConfig.cue.correlation: expected a number in [0.0, 1.0], got 1.5"),
    ("data.cue.strength=0", "RobotConfig.cue.strength: expected an integer in [1, 128], got 0"),
    ("data.render=unknown", "RobotConfig.render: must be one of ['ours', 'reference'], got 'unknown'"),
    ("data.source=pypi", "RobotConfig.source: must be one of ['generator', 'concept_benchmark'], got 'pypi'"),
    ("data.source=concept_benchmark", "RobotConfig.source: source=concept_benchmark makes 0.4.1's own robots: needs render=reference"),
    ("model.training=magic", "model.training must be one of"),
    ("++model._target_=os.system", "model._target_: 'os.system' is a builtin_function_or_method, not a ConceptModel subclass"),
    ("++model._target_=nope.Model", "model._target_: cannot import 'nope.Model' (ModuleNotFoundError"),
    ("++model._target_=cbm.models.config.ModelConfig", "'cbm.models.config.ModelConfig' is a class, not a ConceptModel subclass"),
    ("model.name=cem", "model.name: 'cem' is the built-in cbm.models.cem.CEM, but model._target_ is cbm.models.cbm.CBM (choose the architecture with model=cem)"),
    ("model.optim.lr=fast", "could not be converted to Float (key: optim.lr)"),
    ("model.optim.lr=-1", "optim.lr"),
    ("model.optim.name=rmsprop", "optim.name"),
    ("model.backbone.name=vgg", "backbone.name"),
    ("model.head.kind=tree", "head.kind"),
    ("model.head.C=0", "model: head.C must be > 0 (sklearn's inverse regularisation strength) or null, got 0.0"),
    ("model.head.dropout=1", "model: head.dropout must be in [0, 1), got 1.0"),
    ("model.backbone.maxpool=sometimes", "model: Value 'sometimes' is not a valid bool (type str) (key: backbone.maxpool)"),
    ("model.sequential_concept_fraction=1", "sequential_concept_fraction"),
    ("hydra.run.dir=FX/files/a_file/run", "hydra.run.dir: cannot create"),
    ("cache_dir=FX/files/a_file", "cache_dir: cannot create FX/files/a_file: FX/files/a_file is a file, not a directory"),
    ("cache_dir=FX/files/a_file/sub", "cache_dir: cannot create FX/files/a_file/sub: FX/files/a_file is a file, not a directory"),
    ("resume=FX/files/missing", "resume: "),
    ("resume=FX/files/empty_dir", "not a cbm-train run directory"),
    ("resume=FX/run", "already finished"),
]
TRAIN_MULTI = [
    (["data=cub", "data.root=''"], "data.root: the folder holding CUB_200_2011/ is required"),
    (["data=cub", "data.root=FX/files/a_file"], "cub: data.root FX/files/a_file is not a folder"),
    (["data=cub", "data.root=FX/files/cub_noattr"], "cub: missing FX/files/cub_noattr/CUB_200_2011/attributes/image_attribute_labels.txt"),
    (["data=cub", "data.root=FX/files/cub_badsplit"], "cub: FX/files/cub_badsplit/CUB_200_2011/train_test_split.txt: id 999 is not an image id (1..8)"),
    (["data=cub", "data.root=FX/files/cub_badimage", "data.concepts=voted", "data.min_class_count=1"], "cub: image FX/files/cub_badimage/CUB_200_2011/images/"),
    (["data=cub", "data.root=FX/files/cub_good", "data.concepts=majority"], "data.concepts"),
    (["data=cub", "data.root=FX/files/cub_good", "data.features.kind=maybe"], "data.features.kind"),
    (["data=cub", "data.root=FX/files/cub_good", "data.features.encoder=alexnet"], "data.features.encoder"),
    (["data=cub", "data.root=FX/files/cub_good", "data.concepts=voted", "data.min_class_count=1", "data.features.kind=precompute",
      "data.features.weights=FX/files/missing.pth"], "resnet18: weights file FX/files/missing.pth not found"),
    (["data=cub", "data.root=FX/files/cub_good", "data.concepts=voted", "data.min_class_count=1", "data.features.kind=precompute",
      "data.features.weights=FX/files/random.ckpt"], "resnet18: weights file FX/files/random.ckpt is not a readable state_dict"),
    (["data=derm7pt", "data.root=FX/files/empty_dir"], "derm7pt: missing FX/files/empty_dir/meta/meta.csv"),
    (["data=derm7pt", "data.root=FX/files/empty_dir", "data.task=cancer"], "data.task"),
    (["data=derm7pt", "data.root=''"], "data.root: the Derm7pt release_v0 folder is required"),
    (["data=awa2", "data.root=FX/files/empty_dir"], "awa2: missing FX/files/empty_dir/classes.txt"),
    (["data=awa2", "data.root=FX/files/empty_dir", "data.per_class=0"], "data.per_class"),
    (["data=awa2", "data.root=FX/files/empty_dir", "data.val_fraction=0.5", "data.test_fraction=0.5"], "must be < 1"),
    (["data=celeba", "data.root=FX/files/empty_dir"], "celeba: missing FX/files/empty_dir/list_attr_celeba.txt"),
    (["data=celeba", "data.root=FX/files/empty_dir", "data.max_images=0"], "data.max_images"),
    (["data=celeba", "data.root=FX/files/empty_dir", "+data.groups.extra=[Smiling]"], "data.groups: 'Smiling' is in two groups (mouth, extra)"),
    (["data=celeba", "data.root=FX/files/empty_dir", "data.task=composite", "data.composite.hidden=38"],
     "data.composite: concepts + hidden must be at most CelebA's 40 attributes, got 6 + 38"),
    (["data=cub25", "data.root=FX/files/cub_good"], "cub: data.classes=25 but FX/files/cub_good/CUB_200_2011/classes.txt has 4 classes"),
    (["model.backbone.name=resnet50"], "backbone.name=resnet50 is a pretrained encoder: set backbone.weights"),
    (["model.backbone.freeze=true"], "backbone.freeze needs a pretrained encoder"),
    (["model.backbone.name=resnet18", "model.backbone.weights=FX/files/evil.ckpt"], "resnet18: weights file FX/files/evil.ckpt is not a readable state_dict"),
    (["data=cub", "data.root=FX/files/cub_good", "data.val_fraction=0.6", "data.calib_fraction=0.5"], "data.val_fraction + data.calib_fraction must be < 1"),
    (["model=cem", "model.randint_prob=2"], "randint_prob"),
    (["model=probcbm", "model.n_samples_train=0"], "n_samples_train"),
    (["model=probcbm", "model.warmup_epochs=-1"], "model.warmup_epochs must be >= 0, got -1"),
    (["model=probcbm", "model.logvar_init=abc"], "logvar_init"),
    (["model=ecbm", "model.infer_steps=-1"], "infer_steps"),
    (["model=cem", "model.training=independent"], "CEM trains jointly"),
    (["model=cbm", "model.concept_readout=sharp"], "concept_readout must be one of"),
    (["model=intcem", "model.max_horizon=0"], "model.max_horizon must be >= 1, got 0"),
    (["model=intcem", "model.intervention_task_discount=0"], "model.intervention_task_discount must be > 0, got 0"),
    (["model=intcem", "model.policy_loss_weight=-1"], "model.rollout_task_weight and model.policy_loss_weight must be >= 0"),
    (["model=intcem", "model.policy_weighting=loud"], "model.policy_weighting must be one of ('stakes', 'uniform'), got 'loud'"),
    (["model=dcr", "model.logic=lukasiewicz"], "model.logic must be one of ('godel', 'product'), got 'lukasiewicz'"),
    (["model=sudoku_v04_cbm", "model.ocr.input_px=30"], "model.ocr.input_px must be a multiple of 4 and >= 8 (two 2x2 poolings), got 30"),
    (["model=sudoku_v04_cbm", "model.ocr.class_weights=equal"], "model.ocr.class_weights must be one of ('inverse_frequency', 'none'), got 'equal'"),
    (["model=sudoku_v04_cbm", "model.training=joint"], "the OCR models train their concept / label stage on the true digits (independent), got 'joint'"),
    (["model=sudoku_v04_dnn", "model.dnn_channels=[]"], "model.dnn_channels must be a non-empty list of positive integers, got []"),
    (["model=sudoku_v04_cbm", "model.mc_samples=0"], "model.mc_samples must be a positive integer, got 0"),
    (["data=sudoku_v04", "data.v04.scale=[2,1]"], "SudokuConfig.v04.scale: expected [a, b] with 0.1 <= a <= b <= 4.0, got [2.0, 1.0]"),
    (["model=dcr", "model.rule_threshold=1"], "model.rule_threshold must be in (0, 1), got 1"),
    (["model=dcr", "model.temperature=0"], "model.temperature must be > 0"),
    (["trainer.checkpoint_monitor=val_acc"], "checkpoint_monitor must be one of"),
    (["model=blackbox", "trainer.checkpoint_monitor=concept_auroc"], "a black box has no concepts"),
    (["model=blackbox_v04", "trainer.checkpoint_monitor=concept_f1"], "trainer.checkpoint_monitor=concept_f1: a black box has no concepts"),
    (["model=cbm_v04", "model.concept_readout=sharp"], "concept_readout must be one of"),
    (["data=robot_v04", "data.render=reference", "data.source=concept_benchmark"],
     "RobotConfig.source: source=concept_benchmark needs the reference package, not importable here (missing: concept-benchmark==0.4.1"),
    (["data=robot_v04", "data.render=reference", "data.n_train=25000"], "render=reference splits the 30,720 catalogue rows"),
    (["data=robot_v04", "data.render=reference", "data.n_calib=20000"], "render=reference leaves 13,536 catalogue rows for calibration"),
    (["data=robot_v04", "data.render=reference", "data.occlude=[knees]"], "render=reference draws 0.4.1's robots as they are"),
    (["data.render=reference"], "render=reference splits the 7,680 catalogue rows (renders_per_robot=1)"),
    (["trainer.checkpoint_monitor=last", "trainer.early_stopping_patience=3"], "needs a metric to watch"),
    (["--multirun", "model=cbm,nope"], "unknown model 'nope'"),
    (["--multirun", "seed=0,-1"], "seed must be in"),
    (["trainer=gpu"] if not torch.cuda.is_available() else ["trainer.devices=999", "trainer.accelerator=gpu"], "GPU"),
]
#: Inputs found after data or models load (heavier: torch and lightning are imported).
TRAIN_LATE = [
    ([*DATA, "model.zero_concepts=[wings]"], "zero_concepts: unknown concept 'wings'"),
    ([*DATA, "model=cbm_v04"], "backbone 'plain_cnn' needs image data, but the dataset is tabular"),
    ([*DATA, "model.monotonicity={wings: 1}"], "monotonicity: unknown concept 'wings'"),
    ([*DATA, "model=cem", "model.monotonicity={knees: 1}"], "sign constraints apply to the CBM's linear label predictor"),
    ([*DATA, "data.concept_missing.mechanism=mcar", "data.concept_missing.p=0.99"], "no training row has every concept annotated"),
    (["data.concept_source={kind: clip, checkpoint: FX/files/empty_dir}", "data.n_train=40", "data.n_test=10", "data.n_calib=0"],
     "is not a CLIP model directory"),
    (["data.concept_source={kind: clip, checkpoint: FX/files/empty_dir, concepts_file: FX/files/list.yaml}", "data.n_train=40"],
     "concepts_file: FX/files/list.yaml: item 0 has no text"),
    (["data.concept_source.kind=clip"], "kind=clip needs a CLIP checkpoint"),
]
INTERVENE = [
    ([], "checkpoint"),
    (["checkpoint=FX/files/missing"], "checkpoint not found"),
    (["checkpoint=FX/files/empty_dir"], "no checkpoints/best.ckpt or last.ckpt"),
    (["checkpoint=FX/run", "policy=[psychic]"], "unknown policy 'psychic' (choose from: "),
    (["checkpoint=FX/run", "encoding.kind=soft"], "encoding.kind must be one of"),
    (["checkpoint=FX/run", "encoding.percentiles=[95,5]"], "0 <= low < high <= 100"),
    (["checkpoint=FX/run", "intervener=[wizard]"], "unknown intervener 'wizard'"),
    (["checkpoint=FX/run", "split=holdout"], "split must be one of"),
    (["checkpoint=FX/run", "device=tpu"], "device must be one of"),
    (["checkpoint=FX/run", "intervener.expert.accuracy=1.5"], "intervener.expert: expert accuracy"),
    (["checkpoint=FX/run", "policy.responsiveness.threshold=1"], "policy.responsiveness: threshold must be in [0, 1)"),
    (["checkpoint=FX/run", "policy.responsiveness.prior=psychic"], "prior must be 'independent' or 'empirical'"),
    (["checkpoint=FX/run", "+policy.random.nope=1"], "policy.random: Key 'nope' not in 'Config'"),
    (["checkpoint=FX/run", "intervener=[self]", "+intervener.self.accuracy=0.9"], "intervener.self: Key 'accuracy' not in 'Config'"),
    (["checkpoint=FX/run", "policy.responsiveness.search=psychic"], "search must be one of"),
    (["checkpoint=FX/run", "policy.responsiveness.at_max=every"], "policy.responsiveness: at_max must be one of ('best', 'all'), got 'every'"),
    (["checkpoint=FX/run", "policy.responsiveness.inclusive=maybe"], "policy.responsiveness: Value 'maybe' is not a valid bool"),
    (["checkpoint=FX/run", "policy=[coop]", "policy.coop.entropy_weight=-1"], "policy.coop: entropy_weight, importance_weight and cost_weight must be >= 0"),
    (["checkpoint=FX/run", "policy=[coop]", "policy.coop.costs={knees: -2}"], "policy.coop: costs.knees must be a finite number > 0, got -2.0"),
    (["checkpoint=FX/run", "policy=[coop]", "policy.coop.costs={elbows: 2}"], "policy.coop.costs: unknown concept(s) ['elbows']"),
    (["checkpoint=FX/run", "policy=[gradient]", "policy.gradient.target=hessian"], "policy.gradient: target must be one of ('prob', 'logit')"),
    (["checkpoint=FX/run", "policy=[global_order]", "policy.global_order.batch_size=0"], "policy.global_order: batch_size must be >= 1, got 0"),
    (["checkpoint=FX/run", "policy=[intcem]", "policy.intcem.source=oracle"], "policy.intcem: source must be one of ('auto', 'model', 'fit'), got 'oracle'"),
    (["checkpoint=FX/run", "policy=[intcem]", "policy.intcem.rollouts=0"], "policy.intcem: rollouts must be >= 1, got 0"),
    (["checkpoint=FX/run", "policy=[intcem]", "policy.intcem.weighting=loud"], "policy.intcem: weighting must be one of ('stakes', 'uniform'), got 'loud'"),
    (["checkpoint=FX/run", "intervener=[llm]"], "the llm intervener needs client"),
    (["checkpoint=FX/run", "ks=[]"], "ks must list at least one budget"),
    (["checkpoint=FX/run", "ks=[-1]"], "ks entries"),
    (["checkpoint=FX/run", "ks=[max,max]"], "ks lists the budget 'max' twice"),
    (["checkpoint=FX/run", "costs.concepts={knees: 0}"], "costs.concepts.knees must be a finite number > 0, got 0"),
    (["checkpoint=FX/run", "costs.concepts=5"], "Cannot assign int to Dict[str, Any] (key: costs.concepts)"),
    (["checkpoint=FX/run", "costs.per_cost=maybe"], "Value 'maybe' is not a valid bool"),
    (["checkpoint=FX/run", "hierarchy.propagate=maybe"], "Value 'maybe' is not a valid bool"),
    (["checkpoint=FX/run", "+hierarchy.depth=2"], "Key 'depth' not in 'HierarchyConfig'"),
    (["checkpoint=FX/run", "exchange.first=expert"], "exchange needs first, second and concept together"),
    (["checkpoint=FX/run", "groups=maybe"], "Value 'maybe' is not a valid bool"),
    (["checkpoint=FX/run", "exchange.first=oracle", "exchange.second=oracle", "exchange.concept=knees"], "two different interveners"),
    (["checkpoint=FX/run", "exchange.first=llm", "exchange.second=oracle", "exchange.concept=knees"], "['llm'] not among the selected interveners"),
    (["checkpoint=FX/run", "exchange.first=expert", "exchange.second=oracle", "exchange.concept=wings"], "exchange.concept: unknown concept 'wings'"),
    (["checkpoint=FX/run", "batch_size=0"], "batch_size"),
    (["checkpoint=FX/run", "blackbox=FX/files/missing.json"], "blackbox: metrics file not found"),
    (["checkpoint=FX/run", "blackbox=FX/files/empty_dir"], "no checkpoints/best.ckpt"),
    (["checkpoint=FX/run", "nope=1"], "unknown key 'nope'"),
]
INTERVENE_LATE = [
    (["checkpoint=FX/run", "groups=true"], "groups=true: this data declares no concept groups (data=cub has its attribute groups)"),
    (["checkpoint=FX/files/evil.ckpt"], "could run code (refused)"),
    (["checkpoint=FX/files/random.ckpt"], "is not a readable checkpoint"),
    (["checkpoint=FX/files/truncated.ckpt"], "is not a readable checkpoint"),
    (["checkpoint=FX/files/other.ckpt"], "is not a cbm checkpoint"),
    (["checkpoint=FX/files/target_system.ckpt"], "model._target_: 'os.system' is a builtin_function_or_method, not a ConceptModel subclass"),
    (["checkpoint=FX/files/list.ckpt"], "is not a cbm checkpoint"),
    (["checkpoint=FX/files/a_file"], "is not a readable checkpoint"),
    (["checkpoint=FX/bb"], "black-box model: there are no concepts"),
    (["checkpoint=FX/run", "ks=[99]"], "outside [0, 7]"),
    (["checkpoint=FX/run", "costs.concepts={wings: 2}"], "costs.concepts: unknown concept(s) ['wings']"),
    (["checkpoint=FX/run", "costs.concepts={knees: 5}", "ks=[12]"], "outside [0, 11]"),
    (["checkpoint=FX/run", "policy=[intcem]", "policy.intcem.source=model"], "intcem policy: source=model, but CBM trained no policy"),
    (["checkpoint=FX/run", "concepts=[wings]"], "unknown concept name(s) ['wings']"),
    (["checkpoint=FX/run", "intervener=[llm]", "intervener.llm.client=os:system"], "llm.client: 'os:system'"),
    (["checkpoint=FX/run", "intervener=[llm]", "intervener.llm.client=nope_module:thing"], "llm.client: cannot import"),
    (["checkpoint=FX/run", "intervener=[llm]", "intervener.llm.client=nospec"], "llm.client: must look like"),
    (["checkpoint=FX/run", "blackbox=FX/files/bb_list.json"], "blackbox"),
    (["checkpoint=FX/run", "data.n_test=0"], "test"),
    (["checkpoint=FX/run", "data.concept_set=fine"], "concept"),
]
AUTOMATE = [
    ([], "checkpoint is required"),
    (["checkpoint=FX/files/missing"], "checkpoint not found"),
    (["checkpoint=FX/run", "method=magic"], "method must be one of"),
    (["checkpoint=FX/run", "calib_split=test"], "calib_split must be one of ('calib', 'val'), got 'test'"),
    (["checkpoint=FX/run", "platt=true", "score=uncertainty"], "platt=true scales the predicted probability: it needs score=probability"),
    (["checkpoint=FX/run", "policy=fixed_order", "policy.fixed_order.order=[row1,row1]"], "lists the concept 'row1' twice"),
    (["checkpoint=FX/run", "target_accuracy=2"], "target_accuracy must be in (0, 1]"),
    (["checkpoint=FX/run", "threshold=perclass"], "threshold must be one of ('global', 'classwise'), got 'perclass'"),
    (["checkpoint=FX/run", "sweep_targets=[0.9,0]"], "sweep_targets must be accuracies in (0, 1], got [0.0]"),
    (["checkpoint=FX/run", "sweep_thresholds=[perclass]"], "sweep_thresholds must be rules from ('global', 'classwise'), got ['perclass']"),
    (["checkpoint=FX/run", "sweep_thresholds=[global]"], "sweep_thresholds lists a rule twice or repeats threshold=global: ['global']"),
    (["checkpoint=FX/run", "delta=0"], "delta must be in (0, 1)"),
    (["checkpoint=FX/run", "policy=psychic"], "unknown policy 'psychic'"),
    (["checkpoint=FX/run", "policy=[random,uncertainty]"], "exactly one policy is used here"),
    (["checkpoint=FX/run", "intervener=llm"], "the llm intervener needs client"),
    (["checkpoint=FX/run", "ks=[1,-2]"], "ks entries"),
    (["checkpoint=FX/run", "ks=[0,0]"], "ks lists the budget 0 twice"),
    (["checkpoint=FX/run", "score=vibes"], "score must be one of"),
    (["checkpoint=FX/run", "device=gpu"], "device must be one of"),
]
AUTOMATE_LATE = [
    (["checkpoint=FX/files/evil.ckpt"], "could run code (refused)"),
    (["checkpoint=FX/run", "+costs={wings: 2.0}"], "costs: unknown concept(s) ['wings']"),
    (["checkpoint=FX/run", "+costs={knees: -1}"], "costs.knees must be a finite number > 0, got -1"),
    (["checkpoint=FX/run", "ks=[50]"], "outside [0, 7]"),
]
DATA_CLI = [
    ([], "usage: cbm-data {info,export,show}"),
    (["frob"], "usage: cbm-data {info,export,show}"),
    (["info", "data=robott"], "unknown data 'robott'"),
    (["info", "data.foo=1"], "unknown key 'data.foo'"),
    (["info", "data.n_train=0", "data.n_calib=0", "data.n_test=0"], "every split is empty"),
    (["info", "data.label_rule=bogus"], "label_rule: must be one of ['sparse', 'balanced', 'custom']"),
    (["info", "data.train_constraints=[{expr: 'foot_subtype == 12', min_fraction: 0.2}]"], "matches no robot"),
    (["info", "data=sudoku", "data.corruption=shuffle"], "SudokuConfig.corruption: must be one of ['walk', 'swaps'], got 'shuffle'"),
    (["info", "data=sudoku", "data.block_size=4"], "SudokuConfig.block_size: must be one of [2, 3], got 4"),
    (["info", "data=sudoku", "data.block_size=2"], "block_size=2 makes its invalid boards by swaps: set corruption=swaps"),
    (["info", "data=sudoku", "data.valid_board_ratio=lots"], "'lots' of type 'str' could not be converted to Float (key: valid_board_ratio)"),
    (["info", "data=sudoku", "data.valid_board_ratio=1.5"], "SudokuConfig.valid_board_ratio: expected a number in [0.0, 1.0], got 1.5"),
    (["info", "data=sudoku", "data.glyph_bank=pooled"], "SudokuConfig.glyph_bank: must be one of ['per_split', 'shared'], got 'pooled'"),
    (["info", "data=sudoku", "data.renderer=pen"], "SudokuConfig.renderer: must be one of ['bank', 'v04'], got 'pen'"),
    (["info", "data=sudoku", "data.v04.starter_share=0.5"], "v04.* settings are read only with renderer=v04"),
    (["info", "data=sudoku_v04", "data.style=printed"], "renderer=v04 draws 9x9 boards its own way (handwriting, starters, bubbles): style='printed'"),
    (["info", "data=sudoku_v04", "data.v04.handwriting=font", "data.v04.font_file=/no/such.otf"], "v04.font_file='/no/such.otf' is not a file"),
    (["info", "data=sudoku_v04", "data.v04.blur=[]"], "SudokuConfig.v04.blur: expected a non-empty list of radii in [0, 10], got []"),
    (["info", "data.concept_missing.mechanism=mar"], "concept_missing.mechanism: must be one of"),
    (["info", "data.render=unknown"], "RobotConfig.render: must be one of ['ours', 'reference'], got 'unknown'"),
    (["info", "data=robot_v04", "data.render=reference", "data.source=concept_benchmark"], "source=concept_benchmark needs the reference package"),
    (["info", "nope=1"], "unknown key 'nope'"),
    (["show", "split=nope"], "split must be one of"),
    (["show", "n=0"], "n must be >= 1"),
    (["info", *DATA, "cache_dir=FX/files/a_file"], "a file is in the way"),
    (["export", *DATA], "export needs out="),
    (["export", *DATA, "out=FX/files/empty_dir"], "it is a directory"),
    (["export", *DATA, "out=FX/files/a_file/x.npz"], "a file is in the way"),
    (["show", *DATA, "out=FX/files/x.png"], "show needs image data"),
]
REPORT = [
    ([], "usage: cbm-report RUN_SWEEP_OR_EXPERIMENT_DIR"),
    (["a", "b"], "usage: cbm-report RUN_SWEEP_OR_EXPERIMENT_DIR"),
    (["FX/files/missing"], "does not exist"),
    (["FX/files/a_file"], "is not a directory"),
    (["FX/files/empty_dir"], "no usable metrics.json"),
    (["FX/files/list_metrics"], "not a cbm-train metrics.json"),
    (["FX/files/max_metrics"], "oracle_random must map integer budgets"),
    (["--frob"], "usage: cbm-report"),
    (["collect"], "collect needs two folders: cbm-report collect EXPERIMENT_DIR ARCHIVE_DIR"),
    (["collect", "FX/files/empty_dir", "FX/archive", "extra"], "collect needs two folders"),
    (["collect", "FX/files/missing", "FX/archive"], "FX/files/missing does not exist"),
    (["collect", "FX/files/a_file", "FX/archive"], "is not a directory"),
    (["collect", "FX/files/empty_dir", "FX/archive"], "experiment.json is not a cbm-experiment manifest"),
    (["collect", "FX/files/empty_dir", "FX/files/a_file/archive"], "ARCHIVE_DIR: cannot create"),
    (["diagnose"], "diagnose needs one folder: cbm-report diagnose RUN_OR_EXPERIMENT_DIR"),
    (["diagnose", "FX/run", "FX/bb"], "diagnose needs one folder"),
    (["diagnose", "--frob"], "diagnose needs one folder"),
    (["diagnose", "FX/files/missing"], "FX/files/missing does not exist"),
    (["diagnose", "FX/files/a_file"], "is not a directory"),
    (["diagnose", "FX/files/empty_dir"], "is neither a cbm-train run (no checkpoints/) nor a cbm-experiment"),
    (["diagnose", "FX/bb"], "no trained model with concepts to diagnose (1 black box(es))"),
]

CASES = (
    [("cbm-train", [a], m, ()) for a, m in TRAIN]
    + [("cbm-train", a, m, ()) for a, m in TRAIN_MULTI]
    + [("cbm-train", a, m, (SLOW,)) for a, m in TRAIN_LATE]
    + [("cbm-intervene", a, m, ()) for a, m in INTERVENE]
    + [("cbm-intervene", a, m, (SLOW,)) for a, m in INTERVENE_LATE]
    + [("cbm-automate", a, m, ()) for a, m in AUTOMATE]
    + [("cbm-automate", a, m, (SLOW,)) for a, m in AUTOMATE_LATE]
    + [("cbm-data", a, m, ()) for a, m in DATA_CLI]
    + [("cbm-report", a, m, ()) for a, m in REPORT]
)


def all_cases() -> list:
    """Every module's corpus (this file's and ``test_bad_inputs_*.py``)."""
    out = list(CASES)
    for f in sorted(Path(__file__).parent.glob("test_bad_inputs_*.py")):
        out += importlib.import_module(f.stem).CASES
    return out


def test_the_corpus_is_large():
    cases = all_cases()
    assert len({(p, tuple(a)) for p, a, _, _ in cases}) == len(cases)  # no duplicates
    assert len(cases) >= 300


@pytest.mark.parametrize("prog, args, message", params(CASES))
def test_bad_input_gives_one_line_and_leaves_nothing(fx, tmp_path, prog, args, message):
    assert_refused(fx, tmp_path, prog, args, message)


def test_a_pickle_payload_never_executes(fx):
    """The hostile checkpoint really carries a payload (plain unpickling runs it), and the loader
    refuses it before anything in it runs."""
    from cbm.training.checkpoint import load_model

    with pytest.raises(ValueError, match="could run code"):
        load_model(fx / "files" / "evil.ckpt")
    assert not (fx / "files" / "PWNED").exists()
    marker = fx / "files" / "PWNED-check"
    with open(fx / "files" / "probe.pkl", "wb") as f:
        pickle.dump(Payload(marker), f)
    with open(fx / "files" / "probe.pkl", "rb") as f:
        pickle.load(f)  # noqa: S301 - demonstrates the payload is live
    assert marker.exists()
    marker.unlink()
    (fx / "files" / "probe.pkl").unlink()
