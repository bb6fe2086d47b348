"""Wire format: round trips, every rejection reason, bounded work on hostile frames."""

from __future__ import annotations

import math
import struct
import tracemalloc
from dataclasses import fields
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coallocator import wire
from coallocator.messages import ProgressReport, ReweightCommand
from coallocator.wire import (
    WIRE_VERSION,
    DropReason,
    FrameError,
    WireLimits,
    decode_command,
    decode_report,
    encode_command,
    encode_report,
)

REPORT = ProgressReport(
    job_id="job-7",
    subtask=2,
    node="node-a",
    incarnation=3,
    seq=41,
    real_time=120.5,
    virtual_time=118.25,
    expected_work=6000.0,
    granted_work=5875.5,
    done=False,
)
COMMAND = ReweightCommand("job-7", 2, "node-a", 9, 450.0, 12.5)


def report_envelope(**changes: Any) -> list[Any]:
    """The envelope of REPORT as a list, with fields replaced by name."""
    values = {f.name: getattr(REPORT, f.name) for f in fields(ProgressReport)}
    values.update(changes)
    return [WIRE_VERSION, "progress", *(values[f.name] for f in fields(ProgressReport))]


def command_envelope(**changes: Any) -> list[Any]:
    values = {f.name: getattr(COMMAND, f.name) for f in fields(ReweightCommand)}
    values.update(changes)
    return [WIRE_VERSION, "reweight", *(values[f.name] for f in fields(ReweightCommand))]


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def reason_of(frame: bytes, limits: WireLimits = wire.DEFAULT_LIMITS) -> DropReason:
    with pytest.raises(FrameError) as info:
        decode_report(frame, limits)
    return info.value.reason


# ----------------------------------------------------------------------------- round trips


def test_report_round_trip_keeps_every_field_and_type() -> None:
    frame = encode_report(REPORT)
    back = decode_report(frame)
    assert back == REPORT
    assert type(back) is ProgressReport
    for f in fields(ProgressReport):
        assert type(getattr(back, f.name)) is type(getattr(REPORT, f.name)), f.name


def test_command_round_trip() -> None:
    back = decode_command(encode_command(COMMAND))
    assert back == COMMAND and type(back) is ReweightCommand
    assert type(back.weight) is float and type(back.virtual_weight) is float


def test_frame_is_the_documented_flat_envelope() -> None:
    assert msgpack.unpackb(encode_report(REPORT)) == report_envelope()
    assert msgpack.unpackb(encode_command(COMMAND)) == command_envelope()


def test_encoder_writes_ints_given_for_float_fields_as_floats() -> None:
    rep = ProgressReport("j", 0, "n", 0, 0, 3, 2, 1, 0)  # type: ignore[arg-type]
    obj = msgpack.unpackb(encode_report(rep))
    assert [type(v) for v in obj[7:11]] == [float] * 4
    assert decode_report(encode_report(rep)) == rep


def test_extremes_round_trip() -> None:
    rep = ProgressReport(
        job_id="j" * 255,
        subtask=2**63 - 1,
        node="ü" * 127,  # 254 UTF-8 bytes
        incarnation=0,
        seq=2**63 - 1,
        real_time=0.0,
        virtual_time=1.7976931348623157e308,
        expected_work=5e-324,
        granted_work=0.0,
        done=True,
    )
    assert decode_report(encode_report(rep)) == rep


def test_fast_builder_is_used_and_equals_the_constructor() -> None:
    # the decoder bypasses the dataclass __init__; it must build the same record
    assert wire._build_report is wire._fast_report
    assert wire._build_command is wire._fast_command
    args = [getattr(REPORT, f.name) for f in fields(ProgressReport)]
    built = wire._fast_report(*args)
    assert built == REPORT and hash(built) == hash(REPORT) and repr(built) == repr(REPORT)
    with pytest.raises(AttributeError):
        built.seq = 5  # type: ignore[misc]


def test_slot_check_refuses_a_class_with_post_init() -> None:
    class WithPostInit(ReweightCommand):
        __slots__ = ()

        def __post_init__(self) -> None:  # pragma: no cover - never called here
            pass

    names = tuple(f.name for f in fields(ReweightCommand))
    assert wire._slots_match(ReweightCommand, names)
    assert not wire._slots_match(WithPostInit, names)
    assert not wire._slots_match(ReweightCommand, names[::-1])


names = st.text(min_size=1, max_size=80).filter(lambda s: len(s.encode("utf-8")) <= 255)
wire_ints = st.integers(min_value=0, max_value=2**63 - 1)
wire_floats = st.floats(min_value=0.0, allow_nan=False, allow_infinity=False)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.builds(
        ProgressReport,
        job_id=names,
        subtask=wire_ints,
        node=names,
        incarnation=wire_ints,
        seq=wire_ints,
        real_time=wire_floats,
        virtual_time=wire_floats,
        expected_work=wire_floats,
        granted_work=wire_floats,
        done=st.booleans(),
    )
)
def test_report_round_trip_property(rep: ProgressReport) -> None:
    back = decode_report(encode_report(rep))
    assert back == rep
    assert all(type(getattr(back, f)) is float for f in ("real_time", "virtual_time"))


@settings(max_examples=100, deadline=None)
@given(
    st.builds(
        ReweightCommand,
        job_id=names,
        subtask=wire_ints,
        node=names,
        seq=wire_ints,
        weight=wire_floats,
        virtual_weight=wire_floats,
    )
)
def test_command_round_trip_property(cmd: ReweightCommand) -> None:
    assert decode_command(encode_command(cmd)) == cmd


def test_ints_in_float_fields_are_accepted_as_floats() -> None:
    # e.g. a JavaScript sender packs 120.0 as the int 120
    frame = pack(report_envelope(real_time=120, virtual_time=0, granted_work=2**53))
    back = decode_report(frame)
    assert back.real_time == 120.0 and type(back.real_time) is float
    assert back.virtual_time == 0.0 and type(back.virtual_time) is float
    assert back.granted_work == float(2**53)
    cmd = decode_command(pack(command_envelope(weight=7)))
    assert cmd.weight == 7.0 and type(cmd.weight) is float


def test_float32_is_accepted() -> None:
    frame = msgpack.packb(report_envelope(real_time=1.5), use_single_float=True)
    assert decode_report(frame).real_time == 1.5


# ----------------------------------------------------------------------------- rejections

HUGE = 2**31

REJECTIONS: list[tuple[str, bytes, DropReason]] = [
    ("empty frame", b"", DropReason.TRUNCATED),
    ("truncated frame", encode_report(REPORT)[:-3], DropReason.TRUNCATED),
    ("header only", b"\x9c", DropReason.TRUNCATED),
    ("reserved byte 0xc1", b"\xc1", DropReason.UNDECODABLE),
    ("invalid UTF-8 in a name", pack(report_envelope()).replace(b"job-7", b"job\xff\xfe"),
     DropReason.UNDECODABLE),
    ("deep nesting", b"\x91" * 5000 + b"\x00", DropReason.TOO_DEEP),
    ("array declaring 2**31 elements", b"\xdd" + struct.pack(">I", HUGE), DropReason.OVER_LIMIT),
    ("map declaring 2**31 entries", b"\xdf" + struct.pack(">I", HUGE), DropReason.OVER_LIMIT),
    ("array of 17 elements", pack([1] * 17), DropReason.OVER_LIMIT),
    ("name of 256 bytes", pack(report_envelope(node="n" * 256)), DropReason.OVER_LIMIT),
    ("bin value", pack(report_envelope(job_id=b"job-7")), DropReason.OVER_LIMIT),
    ("ext value", pack(report_envelope(job_id=msgpack.ExtType(5, b"abcd"))),
     DropReason.OVER_LIMIT),
    ("trailing byte", encode_report(REPORT) + b"\x00", DropReason.TRAILING_BYTES),
    ("second envelope", encode_report(REPORT) * 2, DropReason.TRAILING_BYTES),
    ("another version", pack([WIRE_VERSION + 1, *report_envelope()[1:]]), DropReason.BAD_VERSION),
    ("version 0", pack([0, *report_envelope()[1:]]), DropReason.BAD_VERSION),
    ("version as str", pack(["1", *report_envelope()[1:]]), DropReason.BAD_VERSION),
    ("version as bool", pack([True, *report_envelope()[1:]]), DropReason.BAD_VERSION),
    ("version as float", pack([1.0, *report_envelope()[1:]]), DropReason.BAD_VERSION),
    ("another version with other fields", pack([WIRE_VERSION + 1, "progress", {"any": "thing"}]),
     DropReason.BAD_VERSION),
    ("command on the report channel", encode_command(COMMAND), DropReason.BAD_KIND),
    ("unknown kind", pack([WIRE_VERSION, "heartbeat", *report_envelope()[2:]]),
     DropReason.BAD_KIND),
    ("kind as int", pack([WIRE_VERSION, 1, *report_envelope()[2:]]), DropReason.BAD_KIND),
    ("not an array", pack({"version": 1}), DropReason.BAD_SCHEMA),
    ("a bare int", pack(1), DropReason.BAD_SCHEMA),
    ("one element", pack([1]), DropReason.BAD_SCHEMA),
    ("missing field", pack(report_envelope()[:-1]), DropReason.BAD_SCHEMA),
    ("extra field", pack([*report_envelope(), 0]), DropReason.BAD_SCHEMA),
    ("str in an int field", pack(report_envelope(seq="41")), DropReason.BAD_SCHEMA),
    ("float in an int field", pack(report_envelope(seq=41.0)), DropReason.BAD_SCHEMA),
    ("bool in an int field", pack(report_envelope(subtask=True)), DropReason.BAD_SCHEMA),
    ("bool in a float field", pack(report_envelope(real_time=True)), DropReason.BAD_SCHEMA),
    ("nil in a float field", pack(report_envelope(granted_work=None)), DropReason.BAD_SCHEMA),
    ("int in the bool field", pack(report_envelope(done=1)), DropReason.BAD_SCHEMA),
    ("int as a name", pack(report_envelope(node=7)), DropReason.BAD_SCHEMA),
    ("nested array in a field", pack(report_envelope(job_id=["j"])), DropReason.BAD_SCHEMA),
    ("negative seq", pack(report_envelope(seq=-1)), DropReason.BAD_VALUE),
    ("negative subtask", pack(report_envelope(subtask=-3)), DropReason.BAD_VALUE),
    ("uint64 above 2**63-1", pack(report_envelope(incarnation=2**64 - 1)), DropReason.BAD_VALUE),
    ("NaN", pack(report_envelope(virtual_time=math.nan)), DropReason.BAD_VALUE),
    ("+inf", pack(report_envelope(expected_work=math.inf)), DropReason.BAD_VALUE),
    ("-inf", pack(report_envelope(real_time=-math.inf)), DropReason.BAD_VALUE),
    ("negative float", pack(report_envelope(granted_work=-0.5)), DropReason.BAD_VALUE),
    ("negative int in a float field", pack(report_envelope(real_time=-2)), DropReason.BAD_VALUE),
    ("int not exact as float", pack(report_envelope(real_time=2**53 + 1)), DropReason.BAD_VALUE),
    ("empty job id", pack(report_envelope(job_id="")), DropReason.BAD_VALUE),
    ("empty node", pack(report_envelope(node="")), DropReason.BAD_VALUE),
]


@pytest.mark.parametrize(
    ("frame", "reason"), [(f, r) for _, f, r in REJECTIONS], ids=[n for n, _, _ in REJECTIONS]
)
def test_report_rejection_reason(frame: bytes, reason: DropReason) -> None:
    assert reason_of(frame) is reason


def test_every_frame_level_reason_is_exercised() -> None:
    transport_only = {
        DropReason.MULTIPART, DropReason.WRONG_NODE, DropReason.OVERSIZED,
        DropReason.SPOOFED_NODE, DropReason.OLD_INCARNATION,
    }
    assert {r for _, _, r in REJECTIONS} == set(DropReason) - transport_only


def test_oversized_is_checked_before_decoding() -> None:
    limits = WireLimits(max_frame_bytes=100)
    frame = pack(report_envelope(job_id="j" * 60))
    assert len(frame) > 100
    assert reason_of(frame, limits) is DropReason.OVERSIZED
    # a frame of garbage is oversized, not undecodable: nothing was parsed
    assert reason_of(b"\xc1" * (64 * 1024 + 1)) is DropReason.OVERSIZED
    # exactly at the limit is fine
    ok = encode_report(REPORT)
    assert decode_report(ok, WireLimits(max_frame_bytes=max(64, len(ok)))) == REPORT


def test_smaller_name_limit_is_enforced_by_msgpack() -> None:
    limits = WireLimits(max_name_bytes=8)
    assert decode_report(encode_report(REPORT), limits) == REPORT
    assert reason_of(pack(report_envelope(job_id="job-123456")), limits) is DropReason.OVER_LIMIT


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (encode_report(REPORT), DropReason.BAD_KIND),
        (pack(command_envelope()[:-1]), DropReason.BAD_SCHEMA),
        (pack(command_envelope(weight=-1.0)), DropReason.BAD_VALUE),
        (pack(command_envelope(virtual_weight=math.nan)), DropReason.BAD_VALUE),
        (pack(command_envelope(seq=True)), DropReason.BAD_SCHEMA),
        (pack([3, *command_envelope()[1:]]), DropReason.BAD_VERSION),
        (encode_command(COMMAND)[:-1], DropReason.TRUNCATED),
    ],
)
def test_command_rejection_reason(frame: bytes, reason: DropReason) -> None:
    with pytest.raises(FrameError) as info:
        decode_command(frame)
    assert info.value.reason is reason


def test_frame_error_names_the_field() -> None:
    with pytest.raises(FrameError, match="seq"):
        decode_report(pack(report_envelope(seq=-1)))
    with pytest.raises(FrameError, match="virtual_time"):
        decode_report(pack(report_envelope(virtual_time=math.inf)))
    err = FrameError(DropReason.BAD_VALUE, "x: negative")
    assert isinstance(err, ValueError) and str(err) == "bad_value: x: negative"


def test_huge_declared_sizes_are_rejected_without_allocating() -> None:
    frames = [
        b"\xdd" + struct.pack(">I", HUGE),  # array32 of 2**31 elements
        b"\xdd\xff\xff\xff\xff",  # array32 of 2**32 - 1
        b"\xdf" + struct.pack(">I", HUGE),  # map32
        b"\xdb" + struct.pack(">I", HUGE) + b"x" * 100,  # str32 of 2 GiB, 100 bytes given
        b"\xc6" + struct.pack(">I", HUGE),  # bin32
        b"\xc9" + struct.pack(">I", HUGE) + b"\x01",  # ext32
        b"\x9c" + b"\xdd" + struct.pack(">I", HUGE),  # nested inside an envelope
    ]
    # the harness sees msgpack's allocations: a frame that really holds 2**17 elements
    # allocates their 1 MiB list
    tracemalloc.start()
    try:
        big = msgpack.unpackb(b"\xdd" + struct.pack(">I", 2**17) + b"\x00" * 2**17)
        assert len(big) == 2**17
        del big
        _, unlimited_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for frame in frames:
            with pytest.raises(FrameError) as info:
                decode_report(frame)
            assert info.value.reason in (DropReason.OVER_LIMIT, DropReason.TRUNCATED)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert unlimited_peak > 2**20
    assert peak < 64 * 1024


def test_deep_nesting_within_the_parser_stack_is_still_rejected() -> None:
    # 500 levels fit in msgpack's stack: decoded (bounded by the frame length), then
    # refused by the schema
    frame = b"\x93" + bytes([WIRE_VERSION]) + b"\xa8progress" + b"\x91" * 500 + b"\x00"
    assert reason_of(frame) is DropReason.BAD_SCHEMA
    frame = pack(report_envelope(job_id=[[[["deep"]]]]))
    assert reason_of(frame) is DropReason.BAD_SCHEMA


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_ever_raise_frame_error(data: bytes) -> None:
    for decode in (decode_report, decode_command):
        try:
            decode(data)
        except FrameError as exc:
            assert isinstance(exc.reason, DropReason)


msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=4),
    lambda inner: st.lists(inner, max_size=14) | st.dictionaries(st.text(max_size=4), inner,
                                                                  max_size=4),
    max_leaves=30,
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(msgpack_values, min_size=10, max_size=10),
    st.sampled_from([0, 1, 2]),
    st.sampled_from(["progress", "reweight", "x"]),
)
def test_structured_garbage_is_rejected_or_valid(
    values: list[Any], version: int, kind: str
) -> None:
    frame = pack([version, kind, *values])
    try:
        rep = decode_report(frame)
    except FrameError as exc:
        assert isinstance(exc.reason, DropReason)
        return
    # accepted: then it is a valid report, and it re-encodes to an equal one
    assert version == WIRE_VERSION and kind == "progress"
    assert decode_report(encode_report(rep)) == rep


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=11), st.sampled_from(
    [None, True, -1, 2**64 - 1, -0.5, math.nan, math.inf, "", "x", b"", [], {}]
))
def test_any_single_corrupted_field_is_rejected_or_harmless(index: int, value: Any) -> None:
    env = report_envelope()
    env[index] = value
    try:
        rep = decode_report(pack(env))
    except FrameError:
        return
    # the only corruptions that decode are values valid for that field
    assert rep == ProgressReport(*env[2:])


# ----------------------------------------------------------------------------- encoding


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"seq": -1}, "seq"),
        ({"seq": 2**63}, "seq"),
        ({"subtask": True}, "subtask"),
        ({"incarnation": 1.0}, "incarnation"),
        ({"real_time": math.nan}, "real_time"),
        ({"virtual_time": math.inf}, "virtual_time"),
        ({"expected_work": -1.0}, "expected_work"),
        ({"granted_work": "5"}, "granted_work"),
        ({"job_id": ""}, "job_id"),
        ({"node": "n" * 256}, "node"),
        ({"node": 5}, "node"),
        ({"done": 1}, "done"),
    ],
)
def test_encoder_names_the_bad_field(changes: dict[str, Any], field: str) -> None:
    values = {f.name: getattr(REPORT, f.name) for f in fields(ProgressReport)}
    values.update(changes)
    with pytest.raises(ValueError, match=rf"ProgressReport\.{field}:"):
        encode_report(ProgressReport(**values))


def test_encoder_refuses_other_records() -> None:
    with pytest.raises(ValueError, match="report: must be a ProgressReport"):
        encode_report(COMMAND)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="command: must be a ReweightCommand"):
        encode_command(REPORT)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"ReweightCommand\.weight:"):
        encode_command(ReweightCommand("j", 0, "n", 0, -1.0, 0.0))


def test_encoder_respects_a_small_frame_limit() -> None:
    long_job = ProgressReport("j" * 200, 0, "n", 0, 0, 0.0, 0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="max_frame_bytes"):
        encode_report(long_job, WireLimits(max_frame_bytes=64))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_frame_bytes": 10}, "max_frame_bytes"),
        ({"max_name_bytes": 0}, "max_name_bytes"),
        ({"max_array_len": 11}, "max_array_len"),
        ({"max_map_len": -1}, "max_map_len"),
        ({"max_frame_bytes": 1024.0}, "max_frame_bytes"),
    ],
)
def test_limits_are_validated(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=rf"WireLimits\.{field}:"):
        WireLimits(**kwargs)


# ------------------------------------------------------------------------------ hello


@given(st.text(min_size=1, max_size=60).filter(lambda t: len(t.encode()) <= 255))
def test_hello_round_trip_property(node: str) -> None:
    assert wire.decode_hello(wire.encode_hello(node)) == node


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (msgpack.packb([wire.WIRE_VERSION, "hello"]), DropReason.BAD_SCHEMA),
        (msgpack.packb([wire.WIRE_VERSION, "hello", "n1", 7]), DropReason.BAD_SCHEMA),
        (msgpack.packb([wire.WIRE_VERSION, "hello", ""]), DropReason.BAD_VALUE),
        (msgpack.packb([wire.WIRE_VERSION, "hello", 5]), DropReason.BAD_SCHEMA),
        (msgpack.packb([wire.WIRE_VERSION + 1, "hello", "n1"]), DropReason.BAD_VERSION),
        (msgpack.packb([wire.WIRE_VERSION, "reweight", "n1"]), DropReason.BAD_KIND),
        (b"\xc1", DropReason.UNDECODABLE),
    ],
)
def test_hello_rejection_reason(frame: bytes, reason: DropReason) -> None:
    with pytest.raises(wire.FrameError) as exc:
        wire.decode_hello(frame)
    assert exc.value.reason is reason


def test_hello_refuses_a_bad_name() -> None:
    with pytest.raises(ValueError, match="hello.node"):
        wire.encode_hello("")
    with pytest.raises(ValueError, match="hello.node"):
        wire.encode_hello("x" * 256)
