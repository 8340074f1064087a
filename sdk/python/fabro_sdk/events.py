"""Event streams: a session's events over gRPC, resumed after a dropped
connection, and the NDJSON lines of REST's streaming routes."""

import json

import grpc

from fabro.agent.v1 import agent_pb2

# Codes after which the stream is opened again from the last sequence seen.
_RESUMABLE = (grpc.StatusCode.UNAVAILABLE,)


def stream_events(stub, session_id, from_sequence=1, follow=True, prompt_id="", retries=5, metadata=None):
    """Yield the AgentEvents of session_id from from_sequence on (an
    AgentServiceStub). When the connection drops (UNAVAILABLE) the stream
    is opened again after the last event yielded, up to retries times in a
    row, so no event is seen twice and none is missed. With prompt_id the
    stream ends after that prompt's prompt_completed."""
    next_seq, failures = from_sequence, 0
    while True:
        req = agent_pb2.StreamEventsRequest(session_id=session_id, from_sequence=next_seq, follow=follow, prompt_id=prompt_id)
        try:
            for resp in stub.StreamEvents(req, metadata=metadata):
                failures = 0
                next_seq = resp.event.sequence + 1
                yield resp.event
            return
        except grpc.RpcError as err:
            failures += 1
            if err.code() not in _RESUMABLE or failures > retries:
                raise


class StreamError(Exception):
    """A REST stream's error line: {"error": google.rpc.Status}."""

    def __init__(self, status):
        super().__init__(status.get("message", "stream failed"))
        self.status = status


def iter_ndjson(lines):
    """Decode a REST streaming route's body (application/x-ndjson): each
    line is {"result": message} or, last, {"error": google.rpc.Status}.
    Yields each result as a dict; raises StreamError on an error line."""
    for line in lines:
        if isinstance(line, bytes):
            line = line.decode("utf-8")
        line = line.strip()
        if not line:
            continue
        obj = json.loads(line)
        if "error" in obj:
            raise StreamError(obj["error"])
        yield obj.get("result", {})
