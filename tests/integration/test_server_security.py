"""kolo-server with a bearer token and with TLS (a self-signed certificate made with
openssl at test time, SAN IP:127.0.0.1), for gRPC (Python client and kolo CLI) and HTTP
(curl); /healthz stays open. Plaintext without a token is covered by test_server_api."""
import os
import shutil
import subprocess
import tempfile
import unittest

import grpc

from test_server_support import Client, Etcd, Server, curl, kolo, main, pb, spec

TOKEN = "s3cret-token-for-tests"


class SecurityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kolo-sec-")
        cls.cert = os.path.join(cls.dir, "cert.pem")
        cls.key = os.path.join(cls.dir, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout",
                        cls.key, "-out", cls.cert], check=True, capture_output=True)
        token_file = os.path.join(cls.dir, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        cls.etcd = Etcd()
        cls.servers = []
        try:
            cls.token_server = Server(cls.etcd.url, "--token-file", token_file)
            cls.servers.append(cls.token_server)
            cls.tls_server = Server(cls.etcd.url, "--tls-cert", cls.cert, "--tls-key", cls.key)
            cls.servers.append(cls.tls_server)
        except Exception:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        codes = [s.terminate() for s in cls.servers]
        cls.etcd.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert all(c == 0 for c in codes), codes

    def test_grpc_without_or_with_a_wrong_token_is_unauthenticated(self):
        for token in (None, "wrong", TOKEN + "x"):
            client = Client(self.token_server.grpc_target, token=token)
            with self.assertRaises(grpc.RpcError) as ctx:
                client.call("ListJobs", pb.ListJobsRequest())
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
            client.close()
        client = Client(self.token_server.grpc_target, token=TOKEN)
        job = client.call("SubmitJob", spec("t-1"))
        self.assertEqual(job.id, "t-1")
        client.close()

    def test_http_needs_the_token_except_health(self):
        port = self.token_server.http_port
        code, body = curl(port, "/v1/jobs")
        self.assertEqual((code, body["error"]["code"]), (401, "UNAUTHENTICATED"))
        code, body = curl(port, "/v1/jobs", headers=["Authorization: Bearer nope"])
        self.assertEqual(code, 401)
        code, body = curl(port, "/metrics")
        self.assertEqual(code, 401)
        code, body = curl(port, "/v1/jobs", headers=["Authorization: Bearer " + TOKEN])
        self.assertEqual(code, 200)
        self.assertEqual(curl(port, "/healthz"), (200, {"status": "ok"}))

    def test_the_cli_takes_the_token_from_a_flag_or_kolo_token(self):
        code, _, err = kolo(self.token_server, "list")
        self.assertEqual(code, 1)
        self.assertIn("UNAUTHENTICATED", err)
        code, out, err = kolo(self.token_server, "--token", TOKEN, "list")
        self.assertEqual(code, 0, err)
        self.assertIn("warning: --token shows the token to every local user", err)  # ps shows argv
        code, out, err = kolo(self.token_server, "list", env_extra={"KOLO_TOKEN": TOKEN})
        self.assertEqual((code, err), (0, ""))
        token_file = os.path.join(self.dir, "cli-token")
        with open(token_file, "w") as f:
            f.write("  %s\n" % TOKEN)
        code, out, err = kolo(self.token_server, "--token-file", token_file, "list")
        self.assertEqual((code, err), (0, ""))
        code, _, err = kolo(self.token_server, "--token-file", os.path.join(self.dir, "none"), "list")
        self.assertEqual(code, 2, err)

    def test_grpc_over_tls_works_with_the_ca_and_plaintext_fails(self):
        with open(self.cert, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        client = Client(self.tls_server.grpc_target, credentials=creds)
        self.assertEqual(client.call("SubmitJob", spec("tls-1")).id, "tls-1")
        client.close()
        plain = Client(self.tls_server.grpc_target)
        with self.assertRaises(grpc.RpcError) as ctx:
            plain.call("ListJobs", pb.ListJobsRequest(), timeout=3)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAVAILABLE)
        plain.close()
        code, out, err = kolo(self.tls_server, "--tls-ca", self.cert, "get", "tls-1")
        self.assertEqual(code, 0, err)
        self.assertIn("tls-1", out)
        code, _, err = kolo(self.tls_server, "--timeout", "3", "get", "tls-1")
        self.assertEqual(code, 1)

    def test_the_bearer_scheme_is_matched_in_any_case(self):
        port = self.token_server.http_port
        for scheme in ("bearer", "BEARER", "bEaReR"):
            code, _ = curl(port, "/v1/jobs", headers=["Authorization: %s %s" % (scheme, TOKEN)])
            self.assertEqual(code, 200, scheme)
            client = Client(self.token_server.grpc_target)
            client.metadata = [("authorization", "%s %s" % (scheme, TOKEN))]
            client.call("ListJobs", pb.ListJobsRequest())
            client.close()
        code, _ = curl(port, "/v1/jobs", headers=["Authorization: Basic " + TOKEN])
        self.assertEqual(code, 401)

    def test_a_token_file_of_only_whitespace_is_refused_at_startup(self):
        blank = os.path.join(self.dir, "blank-token")
        with open(blank, "w") as f:
            f.write("  \n\t\n")
        with self.assertRaises(RuntimeError) as ctx:
            Server(self.etcd.url, "--token-file", blank)
        self.assertIn("holds no token", str(ctx.exception))

    def test_http_over_tls_works_with_the_ca(self):
        port = self.tls_server.http_port
        code, body = curl(port, "/healthz", scheme="https", extra=["--cacert", self.cert])
        self.assertEqual((code, body), (200, {"status": "ok"}))
        code, body = curl(port, "/v1/jobs", scheme="https", extra=["--cacert", self.cert])
        self.assertEqual(code, 200)
        code, _ = curl(port, "/healthz")
        self.assertNotEqual(code, 200)


if __name__ == "__main__":
    main()
