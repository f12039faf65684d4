"""Store E3 training responses in TransferQueue the way verl's agent loop does, and read them back
through the trainer's one per-step reader, ``RLECMetricsMixin._rlec_step_record``
(:func:`rlec.verl_plugin.trainers.read_step_record`; run by test_e3_plugin.py in a fresh process)::

    python tests/verl_plugin/e3_tq_job.py

Each response's fields are the prompt's fields (``field.update(kwargs)`` in verl's
AgentLoopWorkerTQ: here ``rlec_e3_prompt``, ``rlec_e3_length_mu`` and ``extra_info``) plus ``extra_fields`` with the
reward manager's ``reward_extra_info``; one synthetic padding row is added as verl's
``upsample_batch_to_divisible_size`` does. Prints one JSON line.
"""

from __future__ import annotations

import json

RESPONSES = [  # (uid, session, prompt key, correct)
    ("u1", 0, "question_id:q-1", 1.0), ("u1", 1, "question_id:q-1", 0.0), ("u2", 0, "question_id:q-2", 0.0),
    ("u2", 1, "question_id:q-2", 1.0), ("u2", 2, "question_id:q-2", 1.0),
]


def main() -> dict:
    import ray
    import transfer_queue as tq
    from transfer_queue import KVBatchMeta
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    from rlec.config import compose
    from rlec.verl_plugin import RLECSyncTrainer
    from rlec.verl_plugin.e3 import LENGTH_MU_KEY, PROMPT_KEY

    cfg = compose(["layout=tiny_1gpu", "algorithm=e3", "transfer_queue.backend.SimpleStorage.num_data_storage_units=1"])
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    tq.init(cfg.transfer_queue)
    try:
        rows = [{PROMPT_KEY: key, LENGTH_MU_KEY: 0.001, "extra_info": {"environment": "maze", "difficulty": i},
                 "extra_fields": {"reward_extra_info": {"correct": ok, "e3_length_bias": 1.0}}}
                for i, (_, _, key, ok) in enumerate(RESPONSES)]
        keys = [f"{uid}_{session}_0" for uid, session, _, _ in RESPONSES]
        rows.append(dict(rows[0]))  # padding: a copy of the first sample, tagged
        keys.append("padabc_0_0")
        tags = [{"status": "success"} for _ in RESPONSES] + [{"status": "success", "is_padding": True}]
        tq.kv_batch_put(keys=keys, partition_id="train", tags=tags, fields=list_of_dict_to_tensordict(rows))
        trainer = RLECSyncTrainer.__new__(RLECSyncTrainer)  # the reader uses no trainer state
        record = trainer._rlec_step_record(KVBatchMeta(keys=keys, tags=tags, partition_id="train"), (PROMPT_KEY, "extra_info"))
        return {"records": [[f[PROMPT_KEY], info] for f, info in zip(record.fields, record.reward_info)],
                "extra_info": record.extra_info}
    finally:
        tq.close()
        ray.shutdown()


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(), default=str))
