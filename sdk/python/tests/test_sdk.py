"""fabro_sdk against a real fabro serve: cmd/fabro's TestPythonSDK starts
one (with the fake provider) and runs this with FABRO_TEST_GRPC,
FABRO_TEST_REST, FABRO_TEST_WORKSPACE and FABRO_DATA_DIR set."""

import json
import os
import unittest
import urllib.error
import urllib.request

import grpc

import fabro_sdk
from fabro.agent.v1 import agent_pb2, agent_pb2_grpc
from fabro.llm.v1 import llm_pb2, llm_pb2_grpc
from fabro.sandbox.v1 import sandbox_pb2
from fabro.vault.v1 import vault_pb2, vault_pb2_grpc


def env(name):
    v = os.environ.get(name)
    if not v:
        raise RuntimeError(f"${name} is not set: run these tests through go test ./cmd/fabro -run TestPythonSDK")
    return v


class SDKTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.target, cls.rest = env("FABRO_TEST_GRPC"), env("FABRO_TEST_REST")
        cls.token = fabro_sdk.read_token()  # from $FABRO_DATA_DIR/auth/admin.token
        cls.ch = fabro_sdk.channel(cls.target, cls.token)

    @classmethod
    def tearDownClass(cls):
        cls.ch.close()

    def test_token_and_stubs(self):
        resp = llm_pb2_grpc.LLMGatewayServiceStub(self.ch).ListModels(llm_pb2.ListModelsRequest(page_size=10), timeout=10)
        self.assertTrue(resp.models, "no models")

    def test_plaintext_refused_off_loopback(self):
        with self.assertRaisesRegex(ValueError, "plaintext"):
            fabro_sdk.channel("192.0.2.1:7700", self.token)

    def test_not_found_error_info(self):
        with self.assertRaises(grpc.RpcError) as cm:
            vault_pb2_grpc.VaultServiceStub(self.ch).GetSecret(vault_pb2.GetSecretRequest(name="NO_SUCH_SECRET"), timeout=10)
        d = fabro_sdk.details(cm.exception)
        self.assertEqual(d.code, grpc.StatusCode.NOT_FOUND.value[0])
        self.assertTrue(d.domain and d.reason.isupper(), d)

    def test_bad_request(self):
        with self.assertRaises(grpc.RpcError) as cm:
            vault_pb2_grpc.VaultServiceStub(self.ch).GetSecret(vault_pb2.GetSecretRequest(name=""), timeout=10)
        d = fabro_sdk.details(cm.exception)
        self.assertEqual(d.code, grpc.StatusCode.INVALID_ARGUMENT.value[0])
        self.assertIn("name", [f for f, _ in d.field_violations()], d)

    def test_unauthenticated(self):
        with fabro_sdk.channel(self.target, "not-a-token") as ch, self.assertRaises(grpc.RpcError) as cm:
            vault_pb2_grpc.VaultServiceStub(ch).ListSecrets(vault_pb2.ListSecretsRequest(), timeout=10)
        d = fabro_sdk.details(cm.exception)
        self.assertEqual(d.code, grpc.StatusCode.UNAUTHENTICATED.value[0])
        self.assertTrue(d.reason, d)

    def test_rest_error_body(self):
        req = urllib.request.Request(f"http://{self.rest}/v1/secrets/NO_SUCH_SECRET", headers={"Authorization": "Bearer " + self.token})
        with self.assertRaises(urllib.error.HTTPError) as cm:
            urllib.request.urlopen(req, timeout=10)
        self.assertEqual(cm.exception.code, 404)
        d = fabro_sdk.details_from_rest(cm.exception.read())
        self.assertEqual(d.code, grpc.StatusCode.NOT_FOUND.value[0])
        self.assertTrue(d.reason, d)

    def test_events(self):
        agent = agent_pb2_grpc.AgentServiceStub(self.ch)
        created = agent.CreateSession(agent_pb2.CreateSessionRequest(
            model="anthropic/claude-sonnet-4.5",
            sandbox_spec=sandbox_pb2.SandboxSpec(driver="local", working_directory=env("FABRO_TEST_WORKSPACE"))), timeout=30)
        sid = created.session.session_id
        started = agent.StartPrompt(agent_pb2.StartPromptRequest(session_id=sid, text="Say hello."), timeout=30)
        first = started.from_sequence
        events = list(fabro_sdk.stream_events(agent, sid, from_sequence=first, prompt_id=started.prompt_id))
        seqs = [e.sequence for e in events]
        self.assertEqual(seqs, list(range(first, first + len(seqs))), "sequences have a gap")
        self.assertGreater(len(seqs), 1)
        self.assertTrue(events[-1].HasField("prompt_completed"), events[-1])

        # The same events over REST, an NDJSON line each.
        req = urllib.request.Request(f"http://{self.rest}/v1/sessions/{sid}/events?from_sequence={first}",
                                     headers={"Authorization": "Bearer " + self.token})
        with urllib.request.urlopen(req, timeout=30) as resp:
            self.assertEqual(resp.headers.get_content_type(), "application/x-ndjson")
            lines = list(fabro_sdk.iter_ndjson(resp))
        self.assertEqual([int(r["event"]["sequence"]) for r in lines], seqs)

    def test_ndjson_error_line(self):
        with self.assertRaises(fabro_sdk.events.StreamError) as cm:
            list(fabro_sdk.iter_ndjson([b'{"result":{"a":1}}\n', json.dumps({"error": {"code": 5, "message": "gone"}})]))
        self.assertEqual(cm.exception.status["code"], 5)


if __name__ == "__main__":
    unittest.main()
