import os, sys, random, math, time, torch
from dataclasses import asdict
from rlec.local import warm_start as ws
from rlec.models import load_tokenizer
def main():
    E = os.environ.get
    torch.set_num_threads(int(E("THREADS", "2")))
    st = torch.load(E("CKPT"), weights_only=False)
    cfg = ws.WarmStartConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in st["config"].items()})
    tok = load_tokenizer(); enc = ws.Encoder(tok, st["vocab"])
    m = ws.build_compact_model(cfg, len(enc.vocab)); m.load_state_dict(st["model"]); m.train()
    steps = int(E("STEPS", 300)); lr = float(E("LR", 1e-3)); pw = float(E("PW", 1.0)); bs = int(E("BS", 64))
    opt = torch.optim.AdamW(m.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
    rng = random.Random(int(E("SEED", 1)))
    t0 = time.time()
    for step in range(steps):
        for g in opt.param_groups: g["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / steps))
        prompts, responses = [], []
        for problem, target, abstain in ws.sft_examples(rng, cfg, bs):
            prompts.append(enc.prompt(problem.question, target)); responses.append(enc.response(ws.response_text(problem, abstain)))
        loss = ws.sft_loss(m, enc, prompts, responses, pw)
        opt.zero_grad(); loss.backward(); torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0); opt.step()
        if step % 50 == 0: print(step, round(float(loss), 4), round(time.time() - t0), flush=True)
    torch.save({"config": st["config"], "vocab": st["vocab"], "model": m.state_dict()}, E("OUT"))
if __name__ == "__main__": main()
