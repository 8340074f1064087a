"""Error details: every fabro status carries a google.rpc.ErrorInfo (domain
and UPPER_SNAKE reason), a BadRequest for a bad field, and a RetryInfo where
a retry can succeed (docs/ERRORS.md). gRPC sends them in the trailer
grpc-status-details-bin; REST in the body, a google.rpc.Status in JSON."""

import dataclasses

from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2

_DETAILS_KEY = "grpc-status-details-bin"


@dataclasses.dataclass
class Details:
    """What a failed call said: the code (as an int), the message, and the
    details fabro attaches (None when absent)."""

    code: int
    message: str
    error_info: error_details_pb2.ErrorInfo | None = None
    bad_request: error_details_pb2.BadRequest | None = None
    retry_info: error_details_pb2.RetryInfo | None = None

    @property
    def reason(self):
        return self.error_info.reason if self.error_info else ""

    @property
    def domain(self):
        return self.error_info.domain if self.error_info else ""

    @property
    def retry_delay(self):
        """Seconds to wait before a retry, or None when a retry will not help."""
        if self.retry_info is None or not self.retry_info.HasField("retry_delay"):
            return None
        return self.retry_info.retry_delay.ToTimedelta().total_seconds()

    def field_violations(self):
        """(field path, description) of each bad field."""
        if self.bad_request is None:
            return []
        return [(v.field, v.description) for v in self.bad_request.field_violations]


def _from_status(st):
    d = Details(code=st.code, message=st.message)
    for any_ in st.details:
        for attr, cls in (("error_info", error_details_pb2.ErrorInfo), ("bad_request", error_details_pb2.BadRequest), ("retry_info", error_details_pb2.RetryInfo)):
            if any_.Is(cls.DESCRIPTOR):
                msg = cls()
                any_.Unpack(msg)
                setattr(d, attr, msg)
    return d


def details(err):
    """The Details of a grpc.RpcError (code, message and the decoded details)."""
    for key, value in err.trailing_metadata() or ():
        if key == _DETAILS_KEY:
            st = status_pb2.Status()
            st.ParseFromString(value)
            return _from_status(st)
    return Details(code=err.code().value[0], message=err.details() or "")


def details_from_rest(body):
    """The Details of a REST error body (bytes or str: a google.rpc.Status in
    JSON, as every REST error of fabro is)."""
    st = status_pb2.Status()
    json_format.Parse(body, st)
    return _from_status(st)
