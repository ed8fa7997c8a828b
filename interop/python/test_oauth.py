"""The `mcp` SDK's own OAuth support against Snodo as a resource server: the client is
refused with a 401, discovers the authorization server through the Protected Resource
Metadata, obtains a token for this resource with the client-credentials grant and calls
tools with it; a tool needing a scope the token lacks is answered 403, and the client
steps up."""

import contextlib
import sys

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import TokenStorage
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client

from conftest import ROOT, configured

sys.path.insert(0, str(ROOT / "walkthroughs"))
from idp import Client as Registered, IdentityProvider  # noqa: E402

pytestmark = pytest.mark.anyio

DEADLINE = 60


class Memory(TokenStorage):
    def __init__(self):
        self.tokens = None
        self.info = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.info

    async def set_client_info(self, client_info):
        self.info = client_info


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """A provider and `snodo serve` trusting it, with `confirm_delete` behind its own scope."""
    idp = IdentityProvider({
        "reports": Registered("reports-secret", claims={"org_id": "acme"}),
        # May hold the ordinary scopes but not the one confirm_delete needs.
        "reader": Registered("reader-secret", claims={"org_id": "acme"}, scopes=["mcp", "tools:call"]),
    })
    work = tmp_path_factory.mktemp("oauth")
    config = f"""{idp.trusted_as("org_id")}
[auth.scopes]
mcp = ["mcp"]
tools_call = ["tools:call"]

[auth.scopes.tools]
"confirm_*" = ["files:delete"]
"""
    try:
        with configured(work, {"kind": "memory"}, config) as (_, url):
            yield idp, url
    finally:
        idp.close()


@contextlib.asynccontextmanager
async def connected(url, idp, client_id, secret):
    """A client of `url` that obtains its tokens from `idp` as `client_id`, for the block,
    which must end within DEADLINE."""
    provider = ClientCredentialsOAuthProvider(
        server_url=url, storage=Memory(), client_id=client_id, client_secret=secret, issuer=idp.issuer,
    )
    with anyio.fail_after(DEADLINE):
        http = httpx2.AsyncClient(auth=provider, timeout=30)
        async with http, Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as client:
            yield client


async def test_discovers_the_provider_obtains_a_token_and_calls_a_tool(guarded):
    idp, url = guarded
    before = len(idp.issued)
    async with connected(url, idp, "reports", "reports-secret") as client:
        result = await client.call_tool("greet", {"name": "Ada"})
        assert not result.is_error
        assert result.content[0].text == "Hello, Ada!"
        names = {t.name for t in (await client.list_tools()).tools}
        assert "confirm_delete" in names
    issued = idp.issued[before:]
    assert issued, "the client obtained a token from the provider"
    client_id, resource, asked, granted = issued[0]
    assert client_id == "reports"
    assert resource == url, "the token was asked for this resource (RFC 8707)"
    # The 401's challenge named the scopes of ordinary use; the client asked for them.
    assert set(asked.split()) == {"mcp", "tools:call", "files:delete"}, asked
    assert granted == asked


async def test_a_missing_scope_is_403_and_the_client_steps_up(guarded):
    idp, url = guarded
    before = len(idp.issued)
    async with connected(url, idp, "reader", "reader-secret") as client:
        # Granted less than it asked for: greet works, confirm_delete needs files:delete.
        assert (await client.call_tool("greet", {"name": "Bo"})).content[0].text == "Hello, Bo!"
        with pytest.raises(Exception) as refused:
            await client.call_tool("confirm_delete", {"filename": "a.txt"})
        assert "403" in str(refused.value) or "scope" in str(refused.value).lower(), refused.value
    issued = idp.issued[before:]
    # The first token was granted less than asked; after the 403 the client asked again,
    # for the scopes the challenge named, and was refused them again.
    assert len(issued) >= 2, issued
    assert "files:delete" not in issued[0][3].split()
    assert "files:delete" in issued[-1][2].split(), issued
