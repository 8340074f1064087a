"""A client tool served from Python with Debian's grpcio.

Usage: client_tool.py ADDR SESSION_ID DESCRIPTORS

DESCRIPTORS is a serialized FileDescriptorSet of fabro/agent/v1/agent.proto
and its imports; the message classes are built from it at run time, and the
calls use grpcio's generic stubs, so no generated code is needed. The client
follows the session's events and answers its first client_tool_requested
(the ask_user tool: it answers the question reversed), after checking that
an unknown call id is NOT_FOUND.
"""
import json
import sys

import grpc
from google.protobuf import descriptor_pb2, message_factory


def main():
    addr, session_id, descriptors = sys.argv[1:4]
    with open(descriptors, "rb") as f:
        fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    msgs = message_factory.GetMessages(list(fds.file))
    pkg = "fabro.agent.v1."
    ser = lambda m: m.SerializeToString()
    channel = grpc.insecure_channel(addr)
    stream_events = channel.unary_stream(
        "/fabro.agent.v1.AgentService/StreamEvents",
        request_serializer=ser,
        response_deserializer=msgs[pkg + "StreamEventsResponse"].FromString)
    submit = channel.unary_unary(
        "/fabro.agent.v1.AgentService/SubmitToolResult",
        request_serializer=ser,
        response_deserializer=msgs[pkg + "SubmitToolResultResponse"].FromString)
    Submit = msgs[pkg + "SubmitToolResultRequest"]
    req = msgs[pkg + "StreamEventsRequest"](session_id=session_id, follow=True)
    for resp in stream_events(req, timeout=60):
        ev = resp.event
        if ev.WhichOneof("event") != "client_tool_requested":
            continue
        call = ev.client_tool_requested
        try:
            submit(Submit(session_id=session_id, tool_call_id="no-such-call"), timeout=10)
            print("unknown call id accepted", file=sys.stderr)
            sys.exit(1)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.NOT_FOUND:
                print("unknown call id:", e.code(), file=sys.stderr)
                sys.exit(1)
        question = json.loads(call.arguments)["question"]
        submit(Submit(session_id=session_id, tool_call_id=call.tool_call_id,
                      output="python says: " + question[::-1]), timeout=10)
        print("answered", call.tool_name, call.tool_call_id, flush=True)
        return
    print("the stream ended without client_tool_requested", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
    main()
