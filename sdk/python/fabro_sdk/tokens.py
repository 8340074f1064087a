"""Tokens: where a fabro client finds its token, and a channel presenting it."""

import ipaddress
import os

import grpc

ENV_TOKEN = "FABRO_TOKEN"


def default_data_dir(environ=os.environ):
    """The data directory fabro serve uses by default (XDG)."""
    if environ.get("XDG_DATA_HOME"):
        return os.path.join(environ["XDG_DATA_HOME"], "fabro")
    return os.path.join(os.path.expanduser("~"), ".local", "share", "fabro")


def read_token(token_file=None, data_dir=None, environ=os.environ):
    """The token to present, as the fabro command finds it: token_file,
    else $FABRO_TOKEN, else the admin token fabro serve wrote into its data
    directory (<data-dir>/auth/admin.token)."""
    if token_file is None:
        if environ.get(ENV_TOKEN):
            return environ[ENV_TOKEN].strip()
        token_file = os.path.join(data_dir or environ.get("FABRO_DATA_DIR") or default_data_dir(environ), "auth", "admin.token")
    with open(token_file, encoding="utf-8") as f:
        token = f.read().strip()
    if not token:
        raise ValueError(f"{token_file} holds no token")
    return token


def _loopback(target):
    host = target.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Bearer(grpc.AuthMetadataPlugin):
    def __init__(self, token):
        self._md = (("authorization", "Bearer " + token),)

    def __call__(self, context, callback):
        callback(self._md, None)


def channel(target, token, root_certificates=None):
    """A channel to target (host:port) presenting token on every call.

    With root_certificates (PEM bytes) it is TLS. Without, it is plaintext,
    which is allowed to a loopback address only: a token must not cross a
    network in the clear (as the fabro command refuses to)."""
    creds = grpc.metadata_call_credentials(_Bearer(token))
    if root_certificates is not None:
        return grpc.secure_channel(target, grpc.composite_channel_credentials(grpc.ssl_channel_credentials(root_certificates), creds))
    if not _loopback(target):
        raise ValueError(f"refusing to send a token in plaintext to {target}, which is not on this machine: give root_certificates")
    return grpc.secure_channel(target, grpc.composite_channel_credentials(grpc.local_channel_credentials(), creds))
