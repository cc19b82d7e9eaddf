"""The TRL comparison's TRL arm (`lab.trl_arms.trl`): one GRPOTrainer serves every
repeat, as one generator and trainer serve ours, so the warm-up repeat warms TRL as it warms
ours and a timed round pays for no new trainer or optimizer; each repeat gets its own
prompts and reward."""

from lab.trl_arms import Shape, tiny_setup, trl


def test_one_trainer_and_its_optimizer_serve_every_repeat():
    shape = Shape(questions=2, group=2, max_new_tokens=4, micro_batch_size=4)
    setup = tiny_setup(2, shape)
    rewarded = []
    for r, score in enumerate(list(setup.rewards)):
        setup.rewards[r] = lambda i, text, r=r, score=score: rewarded.append(r) or score(i, text)
    round_ = trl(setup, shape)
    trainer = round_.trainer
    first = round_(0)  # the warm-up repeat
    optimizer = trainer.optimizer
    timed = round_(1)
    assert round_.trainer is trainer and trainer.optimizer is optimizer
    state = next(iter(optimizer.state.values()))
    assert int(state["step"]) == 2  # one optimizer across both repeats' steps
    assert rewarded == [0] * 4 + [1] * 4  # each repeat scored with its own reward
    assert [p["prompt"] for p in trainer.train_dataset] == setup.prompts[1]
    for result in (first, timed):
        assert result["round"] >= result["generate"] > 0 and result["trained"] == 4
