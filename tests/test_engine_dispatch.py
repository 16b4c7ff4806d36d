"""The engine's dispatch machinery: taking the engine lock without a convoy, and resuming a push
held by back-pressure once half of the bound has drained."""
import threading
import time

from ember import config, engine
from ember.engine.core import take_lock

TIMEOUT = 10


def test_take_lock_gets_a_lock_that_another_thread_releases():
    lock, holding, release = threading.Lock(), threading.Event(), threading.Event()

    def hold():
        with lock:
            holding.set()
            release.wait(TIMEOUT)   # blocked outside the GIL: take_lock must stop yielding

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait(TIMEOUT)
    threading.Timer(0.05, release.set).start()
    take_lock(lock)
    try:
        assert release.is_set()
    finally:
        lock.release()
        holder.join(TIMEOUT)


@config.override(MXNET_ENGINE_TYPE='ThreadedEngine', MXNET_ENGINE_MAX_INFLIGHT=4,
                 MXNET_CPU_WORKER_NTHREADS=4)
def test_a_push_held_by_back_pressure_resumes_when_half_the_bound_has_drained():
    eng = engine.get()
    gates = [threading.Event() for _ in range(4)]
    for gate in gates:
        eng.push(lambda gate=gate: gate.wait(TIMEOUT), writes=[eng.new_var()])
    pushed = threading.Event()

    def push_fifth():
        eng.push(lambda: None, writes=[eng.new_var()])
        pushed.set()

    pusher = threading.Thread(target=push_fifth)
    pusher.start()
    try:
        gates[0].set()                      # 3 in flight: above half of 4, still held
        _wait_for(lambda: eng.stats()['inflight'] == 3)
        assert not pushed.wait(0.1)
        gates[1].set()                      # 2 in flight: half drained, the push goes on
        assert pushed.wait(TIMEOUT)
    finally:
        for gate in gates:
            gate.set()
        pusher.join(TIMEOUT)
    eng.wait_all()


def _wait_for(condition):
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, 'condition not reached'
        time.sleep(0.001)
