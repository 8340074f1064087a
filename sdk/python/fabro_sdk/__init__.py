"""fabro_sdk: a small Python client of fabro-go's gRPC API.

The generated stubs are the packages ``fabro.<service>.v1`` (and
``google.rpc`` for error details) beside this one, made by ``make
generate`` from proto/. This package adds what every client needs:

- :mod:`fabro_sdk.tokens`: find the token and open a channel presenting it;
- :mod:`fabro_sdk.errors`: the ErrorInfo, BadRequest and RetryInfo of a
  failed call (gRPC) or of a REST error body;
- :mod:`fabro_sdk.events`: a session's events, resumed from the last
  sequence seen after a dropped connection, and REST's NDJSON streams.
"""

from fabro_sdk.errors import Details, details, details_from_rest
from fabro_sdk.events import iter_ndjson, stream_events
from fabro_sdk.tokens import channel, read_token

__all__ = ["Details", "channel", "details", "details_from_rest", "iter_ndjson", "read_token", "stream_events"]
