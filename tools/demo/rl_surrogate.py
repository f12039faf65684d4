"""A fast surrogate of the demo's RLEC run on the compact model (research tool: minutes instead of an hour).

    python tools/demo/rl_surrogate.py outputs/demo/warm_start --steps 80 --targets 0.1,0.8

Same reward (``rlec.reward.formula.rlec_reward``), b schedule (0 -> 1 over the run), mean-only
group advantage, PPO clip (0.2 / 0.28), token-mean loss, Adam and gradient clipping as the demo's
demo's RLEC run (rlec.demo.pipeline.DEMO_SETTINGS), on the compact model (its ~151,850 unused vocabulary
rows stay frozen at 0, the one difference from the demo's run, which trains them). Every
``--eval-every`` steps it prints greedy coverage / accuracy by target and operand digit count on
fixed problems. Not the deliverable (the demo is ``make demo``): it is how the demo's settings were
found (tools/demo/FINDINGS.md).
"""

import argparse
import random
import time

import torch

from rlec.demo import warm_start as ws
from rlec.models import load_tokenizer
from rlec.grading.outcome import Outcome
from rlec.reward.formula import rlec_reward
from rlec.reward.schedule import LinearSchedule


def main() -> None:
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("warm_start", help="folder with the compact weights (a built warm start, its compact/ subfolder read, or rlec/demo/assets)")
    a.add_argument("--steps", type=int, default=80)
    a.add_argument("--prompts", type=int, default=16, help="prompts per step")
    a.add_argument("--n", type=int, default=8, help="responses per prompt")
    a.add_argument("--mini", type=int, default=4, help="prompts per optimizer step")
    a.add_argument("--lr", type=float, default=1e-4)
    a.add_argument("--temperature", type=float, default=1.0)
    a.add_argument("--digits", default="1,2,3", help="operand digit counts of the training problems")
    a.add_argument("--targets", default="0.1,0.8", help="training targets, or 'range' (uniform 0.01 ... 0.90)")
    a.add_argument("--eval-every", type=int, default=20)
    a.add_argument("--eval-questions", type=int, default=40, help="per digit count")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--threads", type=int, default=1)
    args = a.parse_args()
    torch.set_num_threads(args.threads)
    model, enc, _ = ws.load_compact(args.warm_start, load_tokenizer())
    unused = ws.FULL_VOCAB_SIZE - len(enc.vocab)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    schedule = LinearSchedule(end_step=max(2, args.steps), start_value=0.0, end_value=1.0)
    rng, gen = random.Random(args.seed), torch.Generator().manual_seed(args.seed)
    digits = [int(x) for x in args.digits.split(",")]
    targets = None if args.targets == "range" else [float(x) for x in args.targets.split(",")]
    erng = random.Random(999)
    eval_set = [p for d in (1, 2, 3) for p in
                (ws.addition_problem(erng, d) for _ in range(50 * args.eval_questions)) if d == 1 or ws.is_held_out(p)]
    eval_set = [p for d in (1, 2, 3) for p in [q for q in eval_set if q.digits == d][:args.eval_questions]]  # held out

    def evaluate(step: int) -> None:
        cells = []
        for t in (0.1, 0.3, 0.5, 0.8):
            texts = ws.generate_compact(model, enc, [enc.prompt(pr.question, t) for pr in eval_set])
            out = [ws.grade_text(x, pr.answer) for x, pr in zip(texts, eval_set)]
            cov = sum(o != "abstain" for o in out) / len(out)
            by_d = " ".join(f"d{d} {sum(o != 'abstain' for o, pr in zip(out, eval_set) if pr.digits == d) / args.eval_questions:.2f}"
                            for d in (1, 2, 3))
            cells.append(f"p={t}: coverage {cov:.2f} ({by_d}) accuracy {out.count('correct') / len(out):.2f}")
        print(f"eval {step} | " + " | ".join(cells), flush=True)

    def logprobs(prompts: list, responses: list) -> tuple[torch.Tensor, torch.Tensor]:
        ids, mask = ws.pad_left([p + [t if t < len(enc.vocab) else 0 for t in r] for p, r in zip(prompts, responses)])
        width = max(len(r) for r in responses)
        hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state[:, -width - 1:-1]
        logp = torch.log_softmax(ws.full_vocab_logits_from(model.lm_head(hidden) / args.temperature, unused), -1)
        lp, m = torch.zeros(len(responses), width), torch.zeros(len(responses), width)
        for i, r in enumerate(responses):  # left padded: each response ends at the end
            lp[i, width - len(r):] = logp[i, width - len(r):].gather(1, torch.tensor(r)[:, None]).squeeze(1)
            m[i, width - len(r):] = 1
        return lp, m

    t0 = time.time()
    evaluate(0)
    for step in range(1, args.steps + 1):
        b = schedule(step)
        drawn = [(ws.training_problem(rng, digits),
                  rng.choice(targets) if targets else rng.randint(1, 90) / 100) for _ in range(args.prompts)]
        prompts = [enc.prompt(pr.question, t) for pr, t in drawn for _ in range(args.n)]
        with torch.no_grad():
            texts, tokens = ws.generate_compact(model, enc, prompts, temperature=args.temperature, generator=gen,
                                                return_tokens=True)
        tokens = [t or [enc.index[enc.im_end]] for t in tokens]
        outcomes = [ws.grade_text(x, drawn[i // args.n][0].answer) for i, x in enumerate(texts)]
        rewards = torch.tensor([rlec_reward(Outcome(o), drawn[i // args.n][1], b) for i, o in enumerate(outcomes)])
        advantages = (rewards.view(args.prompts, args.n) - rewards.view(args.prompts, args.n).mean(1, keepdim=True)).flatten()
        with torch.no_grad():
            old, _ = logprobs(prompts, tokens)
        model.train()
        rows = args.mini * args.n
        for s in range(0, len(prompts), rows):
            lp, m = logprobs(prompts[s:s + rows], tokens[s:s + rows])
            ratio = torch.exp(lp - old[s:s + rows, -lp.shape[1]:])
            adv = advantages[s:s + rows, None]
            loss = (torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.28)) * m).sum() / m.sum()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        model.eval()
        if step % 5 == 0:
            print(f"step {step} b {b:.2f} reward {rewards.mean():+.3f} abstain {outcomes.count('abstain') / len(outcomes):.2f} "
                  f"accuracy {outcomes.count('correct') / len(outcomes):.2f} ({time.time() - t0:.0f} s)", flush=True)
        if step % args.eval_every == 0:
            evaluate(step)


if __name__ == "__main__":
    main()
