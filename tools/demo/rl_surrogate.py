"""Surrogate of the local RLEC run on the compact model (research tool): same reward, schedule,
mean-only advantage, PPO clip, Adam; the unused-token rows stay frozen at 0."""
import os, sys, time, math, random, json
import torch
from rlec.local import warm_start as ws
from rlec.reward.formula import rlec_reward, Outcome
from rlec.reward.schedule import LinearSchedule
def _main():
    global model, enc, opt
    E = os.environ.get
    torch.set_num_threads(int(E("THREADS", "1")))
    STEPS = int(E("STEPS", 60)); P = int(E("P", 8)); N = int(E("N", 8)); LR = float(E("LR", 1e-3)); MINI = int(E("MINI", 4))
    SEED = int(E("SEED", 0)); EVAL_EVERY = int(E("EVAL_EVERY", 20)); NEVAL = int(E("NEVAL", 40)); TEMP = float(E("TEMP", 1.0))
    BEND = int(E("BSTEPS", STEPS))
    TGT = [float(x) for x in E("TARGETS", "").split(",") if x]
    RL_DIGITS = [int(x) for x in E("RLD", "1,2,3").split(",")]
    state = torch.load(E("CKPT"), weights_only=False)
    cfg = ws.WarmStartConfig(**state["config"])
    from rlec.models import load_tokenizer
    tok = load_tokenizer()
    enc = ws.Encoder(tok, state["vocab"])
    model = ws.build_compact_model(cfg, len(enc.vocab)); model.load_state_dict(state["model"]); model.eval()
    opt = torch.optim.Adam(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8)
    sched = LinearSchedule(end_step=max(2, BEND), start_value=float(E("B0", 0.0)), end_value=1.0)
    rng = random.Random(SEED); gen = torch.Generator().manual_seed(SEED)
    erng = random.Random(999)
    digit_counts = [1, 2, 3]
    eval_set = [ws.addition_problem(erng, d) for d in digit_counts for _ in range(NEVAL)]
    EVAL_T = [None, 0.1, 0.3, 0.5, 0.8]
    def evaluate():
        res = {}
        for t in EVAL_T:
            texts = ws.generate_compact(model, enc, [enc.prompt(pr.question, t) for pr in eval_set])
            oc = [ws.grade_text(x, pr.answer) for x, pr in zip(texts, eval_set)]
            by_d = {}
            for pr, o in zip(eval_set, oc): by_d.setdefault(pr.digits, []).append(o)
            ans = sum(o != "abstain" for o in oc); cor = oc.count("correct")
            res["bin" if t is None else t] = (ans/len(oc), cor/max(ans,1), {d: (sum(o!="abstain" for o in v)/len(v), v.count("correct")/len(v)) for d, v in by_d.items()})
        line = " | ".join(f"{k}: cov {v[0]:.2f} sel {v[1]:.2f} " + " ".join(f"d{d}:{c:.2f}/{a:.2f}" for d, (c, a) in v[2].items()) for k, v in res.items())
        return res, line
    def logprobs(prompts, resp):
        V = len(enc.vocab)
        ids, mask = ws.pad_left([p + [t if t < V else 0 for t in r] for p, r in zip(prompts, resp)])
        h = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
        L = max(len(r) for r in resp)
        # response tokens are right-aligned... sequences are left padded so response ends at the end
        lp = torch.zeros(len(resp), L); m = torch.zeros(len(resp), L)
        logits = ws.full_vocab_logits_from(model.lm_head(h[:, -L-1:-1]) / TEMP, ws.FULL_VOCAB_SIZE - len(enc.vocab))
        logp = torch.log_softmax(logits, -1)
        for i, r in enumerate(resp):
            k = len(r)
            tgt = torch.tensor(r)
            lp[i, L-k:] = logp[i, L-k:].gather(1, tgt[:, None]).squeeze(1)
            m[i, L-k:] = 1
        return lp, m
    t0 = time.time()
    _, line = evaluate(); print("eval 0 |", line, flush=True)
    for step in range(1, STEPS + 1):
        b = sched(step)
        probs = [(ws.addition_problem(rng, rng.choice(RL_DIGITS)), (rng.choice(TGT) if TGT else ws.draw_target(rng, cfg))) for _ in range(P)]
        prompts = [enc.prompt(pr.question, t) for pr, t in probs for _ in range(N)]
        with torch.no_grad():
            texts, toks = ws.generate_compact(model, enc, prompts, temperature=TEMP, generator=gen, return_tokens=True)
        toks = [t if t else [enc.index[enc.im_end]] for t in toks]
        rewards = []
        outs = []
        for i, x in enumerate(texts):
            pr, t = probs[i // N]
            o = ws.grade_text(x, pr.answer); outs.append(o)
            rewards.append(rlec_reward(Outcome(o), t or 0.0, b))
        r = torch.tensor(rewards).view(P, N); adv = (r - r.mean(1, keepdim=True)).flatten()
        with torch.no_grad():
            old, _ = logprobs(prompts, toks)
        model.train()
        mb = MINI * N
        for s in range(0, P * N, mb):
            sl = slice(s, s + mb)
            lp, m = logprobs(prompts[sl], toks[sl])
            L = lp.shape[1]
            o = old[sl][:, -L:] if old.shape[1] >= L else old[sl]
            ratio = torch.exp(lp - o)
            a = adv[sl][:, None]
            l1 = -a * ratio; l2 = -a * ratio.clamp(0.8, 1.28)
            loss = (torch.maximum(l1, l2) * m).sum() / m.sum()
            opt.zero_grad(); loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step()
        model.eval()
        if step % 5 == 0:
            print(f"step {step} b {b:.2f} reward {r.mean():.3f} abstain {outs.count('abstain')/len(outs):.2f} acc {outs.count('correct')/len(outs):.2f} t {time.time()-t0:.0f}", flush=True)
        if step % EVAL_EVERY == 0:
            _, line = evaluate(); print(f"eval {step} |", line, flush=True)

if __name__ == '__main__':
    _main()
