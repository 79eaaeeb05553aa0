"""The episode book: values cross the storage with their types; the log's buffers survive a checkpoint."""

import numpy as np
import pytest
from gymnasium import spaces

from ppo_dict.data.episodes import KINDS, EpisodeBook, EpisodeLog, decode, encode
from ppo_dict.data.storage import RolloutStorage


@pytest.mark.parametrize(
    "value",
    [
        True,
        3,
        0.1,
        np.float32(0.1),
        np.bool_(False),
        np.int64(-7),
        np.uint8(200),
        np.float16(0.5),
        np.array(0.25, dtype=np.float32),
    ],
)
def test_a_value_comes_back_with_its_type(value) -> None:
    back = decode(*encode(value, "x"))
    expected = value[()] if isinstance(value, np.ndarray) else value
    assert type(back) is type(expected) and back == expected
    assert len(KINDS) < 256  # a kind is a uint8


def test_other_values_are_refused_naming_the_key() -> None:
    for value in ("yes", [1.0], None, np.zeros(2)):
        with pytest.raises(TypeError, match=r"info\['is_success'\] is .*: ppo_dict carries booleans and numbers"):
            encode(value, "info['is_success']")


def test_book_writes_and_the_log_reads_through_the_storage() -> None:
    """Monitor's rounding, success at every end, the info keywords at the ends Monitor sees; env order."""
    storage = RolloutStorage(spaces.Box(-1, 1, (2,)), spaces.Discrete(2), 4, 3, info_keywords=("distance",))
    book = EpisodeBook.for_storage(storage, [1, 2])  # a runner of columns 1 and 2
    for j, rewards in enumerate(([0.1, 0.2, 0.30000001], [1.0])):
        for reward in rewards:
            book.returns[j] += reward
            book.lengths[j] += 1
    book.end(0, {"is_success": np.float32(1.0), "distance": 0.0})
    book.end(1, {"distance": np.int64(2)})
    assert storage.episode(1) == ({"r": 0.6, "l": 3, "distance": 0.0}, 1.0) and type(storage.episode(1)[1]) is np.float32
    assert (
        storage.episode(2) == ({"r": 1.0, "l": 1, "distance": 2}, None) and type(storage.episode(2)[0]["distance"]) is np.int64
    )
    log = EpisodeLog(("distance",))
    log.read(storage, [1, 2])
    assert list(log.info_buffer) == [{"r": 0.6, "l": 3, "distance": 0.0}, {"r": 1.0, "l": 1, "distance": 2}]
    assert list(log.success_buffer) == [1.0]
    assert log.logs() == {
        "rollout/ep_rew_mean": 0.8,
        "rollout/ep_len_mean": 2.0,
        "rollout/distance": 1.0,
        "rollout/success_rate": 1.0,
    }
    with pytest.raises(KeyError, match="info_keywords: the env's info at an episode end has no 'distance'"):
        book.end(0, {"is_success": True})


def test_log_state_round_trip_and_old_checkpoints() -> None:
    log = EpisodeLog(("distance",))
    log.info_buffer.extend([{"r": -1.5, "l": 7, "distance": np.float32(0.5)}, {"r": 2.0, "l": 3}])
    log.success_buffer.extend([True, np.float32(0.0), 1.0])
    again = EpisodeLog(("distance",))
    again.load_state(log.state())
    assert list(again.info_buffer) == list(log.info_buffer) and type(again.info_buffer[0]["distance"]) is np.float32
    assert [type(s) for s in again.success_buffer] == [bool, np.float32, float] and list(again.success_buffer) == list(
        log.success_buffer
    )
    old = {k: v for k, v in log.state().items() if k in ("ep_r", "ep_l")}  # written before successes and keywords were kept
    again.load_state(old)
    assert list(again.info_buffer) == [{"r": -1.5, "l": 7}, {"r": 2.0, "l": 3}] and not again.success_buffer
