"""Generative action-chunk policies (Diffusion Policy, flow matching) and their one-step students.

Behind ``reflexlab bc --policy diffusion|flow`` and ``reflexlab distill --method consistency|meanflow``.
Dataset- and task-agnostic: everything takes episodes ({"obs", "action"[, "images"]} arrays) and a Spec.

* `policy`: `GenerativePolicy` (normalisers + `ObsEncoder` + `ConditionalUnet1D` + method),
  `make_student`, and what gets exported: `OneStepGenerator`, `MultiStepSampler`;
* `diffusion`, `flow`, `meanflow`, `consistency`: each method's loss and sampler;
* `unet`, `normalizer`, `ema`, `dispersive`: building blocks;
* `vision`: `ImageEncoder`, one per camera, for policies that read camera frames (``image_keys``);
* `data`: `ChunkWindows`, training windows cut from episodes;
* `train`: `train_teacher`, `distill_student` (imports TensorBoard: import it only to train).
"""
