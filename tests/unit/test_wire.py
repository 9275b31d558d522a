"""The CLI's own wire code against the real thing: protobuf layout vs the generated descriptors, HPACK vs
RFC 7541's examples, the HTTP/2 client vs a grpcio server."""

from __future__ import annotations

import random
import threading
import time

import grpc
import pytest
from google.protobuf import descriptor

from spur_hpc import conf, grpcutil
from spur_hpc.cli import controller
from spur_hpc.proto import slurm_pb2 as pb
from spur_hpc.proto import slurm_pb2_grpc as pb_grpc
from spur_hpc.wire import grpcwire, hpack, protocodec

_SCALAR_NAMES = {
    descriptor.FieldDescriptor.TYPE_STRING: "string",
    descriptor.FieldDescriptor.TYPE_BYTES: "bytes",
    descriptor.FieldDescriptor.TYPE_BOOL: "bool",
    descriptor.FieldDescriptor.TYPE_INT32: "int32",
    descriptor.FieldDescriptor.TYPE_INT64: "int64",
    descriptor.FieldDescriptor.TYPE_UINT32: "uint32",
    descriptor.FieldDescriptor.TYPE_UINT64: "uint64",
    descriptor.FieldDescriptor.TYPE_DOUBLE: "double",
    descriptor.FieldDescriptor.TYPE_FLOAT: "float",
}


# ---------------------------------------------------------------- protobuf layout


def test_schema_from_slurm_proto_matches_the_generated_descriptors() -> None:
    schema = protocodec.schema()
    file = pb.DESCRIPTOR
    assert set(schema.messages) == set(file.message_types_by_name)
    for name, message in file.message_types_by_name.items():
        ours = schema.messages[name]
        assert set(ours) == set(message.fields_by_name), name
        for field in message.fields:
            mine = ours[field.name]
            assert mine.number == field.number, f"{name}.{field.name}"
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
                value_name = _SCALAR_NAMES.get(value.type, value.type)
                value_name = value.message_type.name if value.message_type else value_name
                assert mine.map_types == (_SCALAR_NAMES[key.type], value_name), name
                continue
            assert mine.repeated == field.is_repeated, f"{name}.{field.name}"
            if field.message_type is not None:
                assert mine.type == field.message_type.name
            elif field.enum_type is not None:
                assert mine.type == field.enum_type.name
            else:
                assert mine.type == _SCALAR_NAMES[field.type], f"{name}.{field.name}"
    for name, enum in file.enum_types_by_name.items():
        assert schema.enums[name] == {v.name: v.number for v in enum.values}
    for name, service in file.services_by_name.items():
        assert schema.services[name] == {m.name: (m.input_type.name, m.output_type.name) for m in service.methods}


def _random_job(rng: random.Random) -> pb.Job:
    text = "".join(rng.choice("abcé€ \n😀") for _ in range(rng.randint(0, 12)))
    spec = pb.JobSpec(
        name=text,
        script=text * 3,
        user="u",
        uid=rng.randint(0, 2**31 - 1),
        gid=rng.randint(0, 9),
        memory_mb=rng.randint(0, 2**40),
        time_limit_secs=rng.randint(0, 10**9),
        environment={f"K{i}": text for i in range(rng.randint(0, 4))},
        nodes=rng.randint(0, 64),
    )
    return pb.Job(job_id=rng.randint(1, 2**53), spec=spec, state=rng.choice(list(pb.JobState.values())),
                  exit_code=rng.randint(-(2**31), 2**31 - 1), signal=rng.randint(0, 64), submit_time=rng.random() * 1e9,
                  nodes=[f"n{i}" for i in range(rng.randint(0, 5))], cancel_requested=rng.random() < 0.5)  # fmt: skip


def test_decoding_generated_bytes_and_encoding_back_is_lossless() -> None:
    rng = random.Random(7)
    for _ in range(200):
        job = _random_job(rng)
        decoded = protocodec.decode("Job", job.SerializeToString())
        assert decoded.job_id == job.job_id and decoded.exit_code == job.exit_code
        assert decoded.spec.environment == dict(job.spec.environment) and decoded.nodes == list(job.nodes)
        again = pb.Job()
        again.ParseFromString(protocodec.encode("Job", decoded))
        assert again == job


def test_requests_built_from_dicts_parse_in_the_generated_classes() -> None:
    data = protocodec.encode(
        "ListJobsRequest", {"job_ids": [5, 2**40], "states": ["RUNNING", 7], "users": ["a"], "include_finished": True}
    )
    parsed = pb.ListJobsRequest.FromString(data)
    assert list(parsed.job_ids) == [5, 2**40] and list(parsed.states) == [pb.RUNNING, pb.NODE_FAIL]
    assert list(parsed.users) == ["a"] and parsed.include_finished


def test_unknown_fields_from_a_newer_controller_are_skipped() -> None:
    newer = protocodec.encode("Node", {"name": "n1"}) + bytes([0xF8, 0x3F, 0x01]) + bytes([0x82, 0x40, 0x02]) + b"hi"
    assert protocodec.decode("Node", newer).name == "n1"


def test_unpacked_repeated_numbers_are_read_too() -> None:
    data = bytes([0x48, 0x05, 0x48, 0x07])  # Node.job_ids (field 9) as two unpacked varints
    assert protocodec.decode("Node", data).job_ids == [5, 7]


def test_json_view_names_enums_and_keeps_every_field() -> None:
    view = protocodec.to_jsonable(pb.Node(name="n", state=pb.DRAINED), "Node")
    assert view["state"] == "DRAINED" and view["job_ids"] == []
    assert view["resources"] == {"cpus": 0, "memory_mb": 0, "gres": {}}


def test_constants_shared_with_modules_the_cli_may_not_import() -> None:
    assert controller.DEFAULT_CONF_PATH == conf.DEFAULT_CONF_PATH


# ---------------------------------------------------------------- HPACK (RFC 7541 Appendix C)


def test_hpack_huffman_example() -> None:
    assert hpack.huffman_decode(bytes.fromhex("f1e3c2e5f23a6ba0ab90f4ff")) == b"www.example.com"
    assert hpack.huffman_decode(bytes.fromhex("a8eb10649cbf")) == b"no-cache"


def test_hpack_request_examples_with_huffman_and_the_dynamic_table() -> None:
    decoder = hpack.HeaderDecoder()
    assert decoder.decode(bytes.fromhex("828684418cf1e3c2e5f23a6ba0ab90f4ff")) == [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
    ]
    assert decoder.decode(bytes.fromhex("828684be5886a8eb10649cbf")) == [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
        ("cache-control", "no-cache"),
    ]
    assert decoder.decode(bytes.fromhex("828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf")) == [
        (":method", "GET"), (":scheme", "https"), (":path", "/index.html"), (":authority", "www.example.com"),
        ("custom-key", "custom-value")]  # fmt: skip


def test_hpack_response_examples_evict_from_a_small_table() -> None:
    decoder = hpack.HeaderDecoder()
    decoder.table_size = 256  # RFC 7541 C.6 uses a 256-byte table
    first = decoder.decode(
        bytes.fromhex(
            "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad171863c78f0b97c8e9ae82ae43d3"
        )
    )
    assert first == [
        (":status", "302"),
        ("cache-control", "private"),
        ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
        ("location", "https://www.example.com"),
    ]
    second = decoder.decode(bytes.fromhex("4883640effc1c0bf"))
    assert second[0] == (":status", "307") and second[1:] == first[1:]
    assert len(decoder.dynamic) == 4


def test_hpack_bad_padding_is_refused() -> None:
    with pytest.raises(hpack.HpackError):
        hpack.huffman_decode(bytes.fromhex("f1e3c2e5f23a6ba0ab90f400"))


def test_hpack_literal_encoding_round_trips_through_the_decoder() -> None:
    headers = [(":path", "/spur.v1.SlurmController/Ping"), ("x" * 200, "y" * 300)]
    assert hpack.HeaderDecoder().decode(hpack.encode_headers(headers)) == headers


# ---------------------------------------------------------------- HTTP/2 client against grpcio


class _Servicer(pb_grpc.SlurmControllerServicer):
    def Ping(self, request, context):
        return pb.PingReply(version="9.9", role="leader", term=12)

    def GetJob(self, request, context):
        if request.job_id == 1:
            time.sleep(1.0)
            return pb.Job(job_id=1)
        context.set_trailing_metadata(((grpcutil.LEADER_METADATA_KEY, "127.0.0.9:6817"), ("other", "x")))
        context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.job_id} does not exist: ünïcødé, 100% sure")

    def ListJobs(self, request, context):
        spec = pb.JobSpec(script="#" * 1000, environment={f"K{i}": "v" * 50 for i in range(20)})
        return pb.ListJobsReply(jobs=[pb.Job(job_id=i, spec=spec) for i in range(1, 3001)])

    def SubmitJob(self, request, context):
        return pb.SubmitJobReply(job_id=len(request.spec.script), duplicate=request.idempotency_key == "k")


@pytest.fixture(scope="module")
def server_address():
    server, port = grpcutil.create_server("127.0.0.1:0", workers=8)
    pb_grpc.add_SlurmControllerServicer_to_server(_Servicer(), server)
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(0)


def call(connection: grpcwire.Connection, method: str, request: dict, timeout: float = 10.0):
    request_type, reply_type = protocodec.schema().services["SlurmController"][method]
    data, _metadata = connection.call(
        f"/spur.v1.SlurmController/{method}", protocodec.encode(request_type, request), timeout
    )
    return protocodec.decode(reply_type, data)


def test_unary_call_and_connection_reuse(server_address: str) -> None:
    connection = grpcwire.Connection(server_address)
    for _ in range(5):
        reply = call(connection, "Ping", {})
        assert (reply.version, reply.role, reply.term) == ("9.9", "leader", 12)


def test_answers_larger_than_the_flow_control_window(server_address: str) -> None:
    reply = call(grpcwire.Connection(server_address), "ListJobs", {})
    assert len(reply.jobs) == 3000 and reply.jobs[-1].job_id == 3000
    assert len(reply.jobs[0].spec.environment) == 20


def test_requests_larger_than_the_servers_window(server_address: str) -> None:
    reply = call(
        grpcwire.Connection(server_address), "SubmitJob", {"spec": {"script": "x" * 2_500_000}, "idempotency_key": "k"}
    )
    assert (reply.job_id, reply.duplicate) == (2_500_000, True)


def test_status_details_and_trailing_metadata(server_address: str) -> None:
    with pytest.raises(grpcwire.RpcError) as caught:
        call(grpcwire.Connection(server_address), "GetJob", {"job_id": 5})
    error = caught.value
    assert error.code == "NOT_FOUND"
    assert error.details == "job 5 does not exist: ünïcødé, 100% sure"
    assert error.leader_hint() == "127.0.0.9:6817" and ("other", "x") in error.trailing


def test_deadline(server_address: str) -> None:
    with pytest.raises(grpcwire.RpcError) as caught:
        call(grpcwire.Connection(server_address), "GetJob", {"job_id": 1}, timeout=0.3)
    assert caught.value.code == "DEADLINE_EXCEEDED"


def test_nothing_listening_is_unavailable() -> None:
    with pytest.raises(grpcwire.RpcError) as caught:
        grpcwire.Connection("127.0.0.1:1").call("/spur.v1.SlurmController/Ping", b"")
    assert caught.value.code == "UNAVAILABLE" and "Connection refused" in caught.value.details


def test_a_server_that_goes_away_between_calls(server_address: str) -> None:
    server, port = grpcutil.create_server("127.0.0.1:0", workers=2)
    pb_grpc.add_SlurmControllerServicer_to_server(_Servicer(), server)
    server.start()
    connection = grpcwire.Connection(f"127.0.0.1:{port}")
    assert call(connection, "Ping", {}).term == 12
    server.stop(0).wait()
    with pytest.raises(grpcwire.RpcError) as caught:
        call(connection, "Ping", {}, timeout=2)
    assert caught.value.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "INTERNAL")


def test_parallel_connections_do_not_share_state(server_address: str) -> None:
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            connection = grpcwire.Connection(server_address)
            for _ in range(20):
                assert call(connection, "Ping", {}).term == 12
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors


@pytest.mark.parametrize(
    ("address", "expected"),
    [("127.0.0.1:6817", ("127.0.0.1", 6817)), ("http://ctl1:7000/", ("ctl1", 7000)), ("[::1]:6817", ("::1", 6817))],
)
def test_address_forms(address: str, expected: tuple[str, int]) -> None:
    assert grpcwire.split_address(address) == expected


def test_controller_addresses_from_the_environment() -> None:
    env = {"SPUR_CONTROLLER_ADDR": "http://ctl1:6817, ctl2 ,ctl1:6817"}
    assert controller.controller_addresses(env) == ["ctl1:6817", "ctl2:6817"]


def test_plain_spur_conf_hosts_reader_agrees_with_the_full_loader(tmp_path) -> None:
    text = '[cluster]\nname = "x"\n\n[controller]\nhosts = [\n  "ctl1:6817",  # first\n  \'ctl2\',\n]\n'
    assert controller.hosts_from_conf_text(text) == list(conf.parse(text).controller.hosts)
    assert controller.hosts_from_conf_text('[controller]\nhosts = "ctl1"\n') is None  # left to the full loader
