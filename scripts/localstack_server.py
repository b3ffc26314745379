"""Runs LocalStack's own SQS implementation on the host (no Docker), on 127.0.0.1 only.

LocalStack's twisted gateway listens on every interface whatever GATEWAY_LISTEN's host says;
this gives each of its TCP endpoints the loopback interface, then runs LocalStack's main
module. The configuration comes from the environment (see scripts/with-localstack.sh).
"""

import runpy

from twisted.internet import endpoints

_init = endpoints.TCP4ServerEndpoint.__init__


def _loopback_only(self, reactor, port, backlog=50, interface=""):
    _init(self, reactor, port, backlog, "127.0.0.1")


endpoints.TCP4ServerEndpoint.__init__ = _loopback_only
runpy.run_module("localstack.runtime.main", run_name="__main__", alter_sys=True)
