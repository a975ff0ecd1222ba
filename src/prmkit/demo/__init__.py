"""prmkit.demo: process reward models in a controlled world (docs/demo-world.md).

- `world`: problems, computation trees, the solver and its mistakes, the checker's exact
  step labels, the sampler behind prmkit's `Sampler`, kinds of error (no torch);
- `lm`: the small language models: backbone, MathMix corpus, shared base, the reward
  models' LM loss, the skill indicator, the RL policy;
- `settings`: one `FIELD=VALUE` parser and one key for every configuration;
- `core`: what the experiments share: the demo's settings, a seed's world and models (one
  cache rule), scores and checked pools, a seed's evaluation, the small-scale setup, reports;
- `recipes`: one module per experiment (`prmkit demo --experiment NAME`), each a `Config`,
  `quick(seeds)` and `run(cfg, out, work)`; no recipe imports another.
"""
