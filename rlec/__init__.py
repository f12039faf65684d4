"""rlec: train one language model to follow a confidence target stated in its prompt.

Given a target p, the model should answer only when it believes it is right with probability
above p, and otherwise abstain with ``I don't know``. The pieces:

- :mod:`rlec.rewards`   the RLEC reward family R_p^(b) and the linear schedule of b;
- :mod:`rlec.grading`   final-answer extraction, abstention, math-verify and HotpotQA grading;
- :mod:`rlec.score`     the verl-compatible ``compute_score``;
- :mod:`rlec.models`    the bundled Qwen3 tokenizer and the tiny random Qwen3-MoE.

The pure modules (rewards, grading, score, prompts, data, metrics) import neither verl nor
torch.distributed; only ``rlec.verl_plugin`` touches verl's registries and only
``rlec.megatron`` touches Megatron.
"""

__version__ = "0.1.0"
