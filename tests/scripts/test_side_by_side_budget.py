"""scripts/side_by_side.py's loop (``supervise``, which reproduce_table6_gpu.py calls too): every job has ended by
the budget, the stops go out together ``tail_s`` before it, a job in its tail goes on, a job that does not stop is
killed at the end, a signal stops them all; queued jobs take the free slots, none after a stop for the budget. Fake
processes on a fake clock: no training, no waiting."""

import os
import signal

import pytest

T0 = 1000.0


class Proc:
    """A training process: ``rate`` steps a second (its progress written as Lightning's CSV as the clock goes; None:
    none written yet, a run still starting), ``tail`` seconds of test after its last step, then exit 0; a SIGTERM ends
    it ``stop_s`` seconds later (its checkpoint; None: it ignores SIGTERM), with 143; a SIGKILL at once, with -9."""

    def __init__(self, world, pid, progress, steps, rate, tail, stop_s):
        self.world, self.pid, self.progress, self.steps, self.rate = world, pid, progress, steps, rate
        self.begin, self.tail, self.stop_s, self.end, self.code = world.t, tail, stop_s, None, None
        if rate:
            self.end, self.code = self.begin + (steps - 1) / rate + tail, 0

    def advance(self, t):
        if self.rate and (self.end is None or t <= self.end):
            step = min(self.steps - 1, int(self.rate * (t - self.begin)))  # a row every 10 steps, and the last
            self.progress.write_text("loss,step\n" + "".join(f"0.5,{s}\n" for s in [*range(0, step, 10), step]))

    def signal(self, sig, t):
        if sig == signal.SIGKILL and (self.end is None or self.end > t):
            self.end, self.code = t, -9
        elif sig == signal.SIGTERM and self.stop_s is not None and (self.end is None or t + self.stop_s < self.end):
            self.end, self.code = t + self.stop_s, 143

    def poll(self):
        return self.code if self.end is not None and self.end <= self.world.t else None

    def wait(self):
        assert self.poll() is not None, "waited for a process that is still running"
        return self.code


class World:
    """The fake clock, its sleep (which moves every process on) and the processes' launch and kill."""

    def __init__(self, tmp_path, **procs):
        self.tmp, self.t, self.procs, self.by_pid, self.kills, self.looks = tmp_path, T0, procs, {}, [], []
        self.interrupt_at = self.interrupted = None

    def clock(self):
        return self.t

    def sleep(self, seconds):
        assert seconds >= 0
        self.looks.append(self.t)
        self.t += seconds
        for proc in self.by_pid.values():
            proc.advance(self.t)
        if self.interrupt_at is not None and self.t >= self.interrupt_at:
            self.interrupt_at, self.interrupted = None, self.t
            os.kill(os.getpid(), signal.SIGTERM)  # supervise's handler turns it into a stop of every job

    def launch(self, job):
        job.proc = Proc(self, 100 + len(self.by_pid), self.tmp / f"{job.name}.csv", job.steps, **self.procs[job.name])
        self.by_pid[job.proc.pid] = job.proc

    def kill(self, pid, sig):
        self.kills.append((self.t, self.by_pid[pid], sig))
        self.by_pid[pid].signal(sig, self.t)


@pytest.fixture
def script(load_script):
    return load_script("side_by_side")


def supervise(script, world, budget, tail, steps=400, **options):
    specs = [{"name": name, "argv": ["train.py"], "steps": steps, "progress": str(world.tmp / f"{name}.csv")}
             for name in world.procs]
    jobs = script.make_jobs(specs, "the test")
    signalled = script.supervise(jobs, world.tmp, T0, budget, tail_s=tail, clock=world.clock, sleep=world.sleep,
                                 launch=world.launch, kill=world.kill, **options)
    return {row["name"]: row for row in script.summary(jobs)}, signalled


def ended_by(world, t):
    return all(p.end is not None and p.end <= t for p in world.by_pid.values())


def test_the_stops_go_out_together_a_tail_before_the_budget_and_every_run_has_ended_by_it(script, tmp_path):
    """The user's probe: four runs, a 50 s budget, a 5 s tail; no progress measured yet (runs still starting), so no
    projection: it stopped them one after another, 20 s each at most, and ended 29 s past the budget."""
    world = World(tmp_path, **{f"r{i}": {"rate": None, "tail": 0, "stop_s": 3.0} for i in range(4)})
    rows, signalled = supervise(script, world, budget=50, tail=5)
    assert [(t, sig) for t, _, sig in world.kills] == [(T0 + 45, signal.SIGTERM)] * 4  # all at once, at 45 s
    assert ended_by(world, T0 + 48) and world.t <= T0 + 50 and signalled == 0
    assert all(row["state"] == "stopped: budget spent" and row["returncode"] == 143 for row in rows.values())
    assert max(b - a for a, b in zip(world.looks, world.looks[1:])) <= 1.0  # a 50th of the budget between looks


def test_a_run_in_its_tail_goes_on_and_one_that_does_not_stop_is_killed_at_the_end(script, tmp_path):
    world = World(tmp_path, done={"rate": 9.0, "tail": 10.0, "stop_s": 3.0},  # its last step at 44 s, its test to 54 s
                  slow={"rate": None, "tail": 0, "stop_s": 3.0}, stuck={"rate": None, "tail": 0, "stop_s": None})
    rows, _ = supervise(script, world, budget=60, tail=10)
    assert rows["done"]["state"] == "finished" and rows["done"]["returncode"] == 0
    assert [(t, p.pid, sig) for t, p, sig in world.kills] == [
        (T0 + 50, 101, signal.SIGTERM), (T0 + 50, 102, signal.SIGTERM), (T0 + 60, 102, signal.SIGKILL)]
    assert rows["slow"]["state"] == "stopped: budget spent" and rows["slow"]["returncode"] == 143
    assert rows["stuck"]["state"] == "stopped: budget spent (killed: its stop outlasted the tail)"
    assert rows["stuck"]["returncode"] == -9 and ended_by(world, T0 + 60) and world.t == T0 + 60


def test_a_run_projected_past_the_budget_stops_the_least_wanted_without_waiting_for_it(script, tmp_path):
    """Two runs that cannot both finish: once measured for a fifth of the budget, the second (least wanted) gets its
    SIGTERM; the look after it comes at once (no wait of 20 s), and the first finishes within the budget."""
    world = World(tmp_path, first={"rate": 4.0, "tail": 5.0, "stop_s": 8.0},
                  second={"rate": 1.0, "tail": 5.0, "stop_s": 8.0})
    rows, _ = supervise(script, world, budget=150, tail=10)
    ((t, proc, sig),) = world.kills
    assert proc.pid == 101 and sig == signal.SIGTERM and t <= T0 + 40  # a fifth of 150 s, and a window
    assert [look for look in world.looks if t <= look < t + 8][1] - t <= 0.5  # looks go on while it stops
    assert rows["second"]["state"] == "stopped: projected past the budget"
    assert rows["first"]["state"] == "finished" and ended_by(world, T0 + 150)


def test_a_signal_to_the_call_stops_every_run_at_once_and_is_its_exit_status(script, tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    world = World(tmp_path, a={"rate": 2.0, "tail": 0, "stop_s": 2.0}, b={"rate": None, "tail": 0, "stop_s": 2.0})
    world.interrupt_at = T0 + 20
    rows, signalled = supervise(script, world, budget=600, tail=30)
    assert signalled == 128 + signal.SIGTERM and signal.getsignal(signal.SIGTERM) is before
    assert {(t, sig) for t, _, sig in world.kills} == {(world.kills[0][0], signal.SIGTERM)} and len(world.kills) == 2
    assert world.kills[0][0] == world.interrupted and ended_by(world, world.interrupted + 2)
    assert {row["state"] for row in rows.values()} == {"stopped: interrupted"}


def test_a_queued_job_takes_the_first_free_slot_and_starts_at_that_look(script, tmp_path):
    world = World(tmp_path, a={"rate": 40.0, "tail": 0, "stop_s": 1.0}, b={"rate": 20.0, "tail": 0, "stop_s": 1.0},
                  c={"rate": 40.0, "tail": 0, "stop_s": 1.0})
    rows, signalled = supervise(script, world, budget=600, tail=30, max_parallel=2)
    started = {p.pid: p.begin for p in world.by_pid.values()}
    assert started[100] == started[101] == T0 and T0 + 399 / 40 < started[102] <= T0 + 399 / 40 + 12  # a look: 12 s
    assert all(row["state"] == "finished" for row in rows.values()) and signalled == 0 and not world.kills


def test_no_queued_job_starts_after_a_stop_for_the_budget(script, tmp_path):
    """A job stopped for its projection holds the queue (``not started: budget``); so does the tail's start (``not
    started: budget spent``), when a slot frees only then."""
    world = World(tmp_path, first={"rate": 4.0, "tail": 5.0, "stop_s": 8.0},
                  second={"rate": 1.0, "tail": 5.0, "stop_s": 8.0}, third={"rate": 4.0, "tail": 0, "stop_s": 1.0})
    rows, _ = supervise(script, world, budget=150, tail=10, max_parallel=2)
    assert rows["second"]["state"] == "stopped: projected past the budget" and len(world.by_pid) == 2
    assert rows["third"]["state"] == "not started: budget" and rows["third"]["seconds"] is None
    world = World(tmp_path, long={"rate": None, "tail": 0, "stop_s": 2.0}, next={"rate": 4.0, "tail": 0, "stop_s": 1.0})
    rows, _ = supervise(script, world, budget=60, tail=10, max_parallel=1)
    assert rows["long"]["state"] == "stopped: budget spent" and rows["next"]["state"] == "not started: budget spent"
    assert [(t, sig) for t, _, sig in world.kills] == [(T0 + 50, signal.SIGTERM)] and len(world.by_pid) == 1


def test_without_a_tail_the_jobs_are_killed_at_the_budget(script, tmp_path):
    world = World(tmp_path, a={"rate": None, "tail": 0, "stop_s": 3.0}, b={"rate": None, "tail": 0, "stop_s": 3.0})
    rows, _ = supervise(script, world, budget=30, tail=0)
    assert [(t, sig) for t, _, sig in world.kills] == [(T0 + 30, signal.SIGKILL)] * 2 and world.t == T0 + 30
    assert {row["state"] for row in rows.values()} == {"stopped: budget spent (killed)"}


def test_a_signal_holds_the_queue_and_a_crash_leaves_no_job_unwatched(script, tmp_path):
    world = World(tmp_path, a={"rate": None, "tail": 0, "stop_s": 2.0}, b={"rate": None, "tail": 0, "stop_s": 2.0})
    world.interrupt_at = T0 + 5
    rows, signalled = supervise(script, world, budget=600, tail=30, max_parallel=1)
    assert signalled == 128 + signal.SIGTERM and rows["a"]["state"] == "stopped: interrupted"
    assert rows["b"]["state"] == "not started: interrupted" and len(world.by_pid) == 1
    world = World(tmp_path, a={"rate": None, "tail": 0, "stop_s": 2.0}, b={"rate": None, "tail": 0, "stop_s": 2.0})
    launch = world.launch

    def launch_once(job):
        if world.by_pid:
            raise OSError("no such program")
        launch(job)

    world.launch, before = launch_once, signal.getsignal(signal.SIGTERM)
    with pytest.raises(OSError, match="no such program"):
        supervise(script, world, budget=600, tail=30)
    assert [(p.pid, sig) for _, p, sig in world.kills] == [(100, signal.SIGTERM)]
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_tail_must_leave_part_of_the_budget(script, tmp_path):
    with pytest.raises(ValueError, match="the tail"):
        supervise(script, World(tmp_path, a={"rate": None, "tail": 0, "stop_s": 1.0}), budget=30, tail=30)
