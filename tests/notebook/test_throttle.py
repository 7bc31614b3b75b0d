"""``Throttle``: at most ``rate`` sends a second, one waiting at a time, none left once a send went."""

from __future__ import annotations

import asyncio

from dagmagic.notebook.throttle import Throttle


def test_without_a_loop_it_sends_at_once() -> None:
    sent: list[int] = []
    throttle = Throttle(lambda: sent.append(1), rate=1.0)
    throttle.soon()
    assert sent == [1]


async def test_changes_within_the_interval_make_one_send_after_it_and_a_send_now_drops_the_waiting_one() -> None:
    loop = asyncio.get_running_loop()
    times: list[float] = []
    throttle: Throttle

    def send() -> None:
        throttle.sent()
        times.append(loop.time())

    throttle = Throttle(send, rate=20.0)  # 50 ms apart at least
    start = loop.time()
    send()
    for _ in range(5):
        throttle.soon()  # five changes at once: one send, once 50 ms have passed
    await asyncio.sleep(0.2)
    assert len(times) == 2 and times[1] - times[0] >= 0.045
    throttle.soon()
    send()  # the final state, at once: the waiting send is dropped
    await asyncio.sleep(0.2)
    assert len(times) == 3 and times[0] >= start
