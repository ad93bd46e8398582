from tests.sessions.conftest import session_host

__all__ = ["session_host"]
