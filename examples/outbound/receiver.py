"""A tiny HTTP endpoint for trying the notifier example: prints each POST.

    python3 examples/outbound/receiver.py 8099
"""
import http.server
import sys


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        authorized = self.headers.get("Authorization", "").startswith("Bearer ")
        print(self.path, "authorized" if authorized else "no token", body.decode(errors="replace"), flush=True)
        self.send_response(204)
        self.end_headers()


port = int(sys.argv[1]) if len(sys.argv) > 1 else 8099
http.server.HTTPServer(("127.0.0.1", port), Receiver).serve_forever()
