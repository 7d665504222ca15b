"""A loopback Hugging Face Hub for tests, in the standard library only.

No machine of this project reaches huggingface.co, and no Hub server that accepts uploads can be installed
from the package registries. This module speaks enough of the Hub's HTTP API that the *real*
`huggingface_hub` (1.33 to 2.4) and `transformers` (5.17 to 5.24: the range the package supports, both ends tested)
clients run against it unchanged: `create_repo`, `upload_folder` / `create_commit` (inline and LFS, single-part and
multipart), `create_branch` / `create_tag`, `model_info`, `list_repo_tree`, `list_repo_commits`, `hf_hub_download`,
`snapshot_download`, `from_pretrained` and `push_to_hub`. The comments below say which client behaviour each answer serves.

    with LoopbackHub() as hub:                    # binds 127.0.0.1 and 127.0.0.2 (the CDN), stops on exit
        env = hub.client_env(hf_home=tmp_dir)     # HF_ENDPOINT, HF_TOKEN, HF_HUB_DISABLE_XET=1, ...
        subprocess.run([sys.executable, "client.py"], env=env)

or, in a pytest conftest that must run before anything imports huggingface_hub,
`hub = start_session_hub()` (see its docstring).

Two ports, like the real Hub: the API (`hub.endpoint`) and a "CDN" (`hub.cdn`) that stores and serves LFS
objects. Because the CDN is another origin, the client treats LFS downloads as it does on the Hub: it reads
the `X-Linked-*` headers of the 302 and drops the `Authorization` header for the download.

Accounts: `tokens` maps access tokens to user names and `orgs` maps organisation names to their members.
Requests without a token are anonymous; a wrong token gets 401 "Invalid credentials in Authorization header"
on every API endpoint, as on the Hub. Writing needs a valid token whose user owns the namespace (or is a member of
the organisation), else 401 (anonymous) / 403 (another namespace). Private repos look missing (401/404 +
`X-Error-Code: RepoNotFound`) to anyone who may not read them.

State lives in memory (repos, commits with parents, branches, tags, `refs/pr/N`, a blob store keyed by git
SHA-1 and an LFS store keyed by SHA-256) and disappears with the server. `README.md` front matter is parsed
with PyYAML when it is importable (it is a dependency of huggingface_hub); the server imports nothing else
outside the standard library.

Not covered, unlike the real Hub: Xet storage (the client must run with HF_HUB_DISABLE_XET=1, or the hub with
`lfs_mode="never"`), the discussions API (`create_pull_request`; `?create_pr=1` on a commit is supported),
gated repos, rate limits, the Hub's full metadata validation, `safetensors`/`transformersInfo` in model_info,
canonical repo ids without a namespace, and concurrency conflicts other than a stale `parentCommit`.

Run as a script (`python tests/support/hub_server.py --max-seconds 90`) it prints its endpoints as one JSON line and
serves until the bound or Ctrl-C.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import fnmatch
import hashlib
import itertools
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit


logger = logging.getLogger(__name__)

HOST = "127.0.0.1"  # never anything else: the server must not be reachable from outside the machine
# The CDN on another loopback address (Linux routes all of 127.0.0.0/8 to the loopback device): another host name,
# as the Hub's CDN has, so that clients which follow same-host redirects (huggingface_hub 1.x) read the LFS
# redirect's own headers, as they do on the Hub.
CDN_HOST = "127.0.0.2"

# The Hub's rule for what must go through LFS (it rejects such files inlined in a commit): bigger than 10 MB,
# binary (a NUL byte in the first 512 bytes, the `sample` the client sends), or matching a `filter=lfs`
# pattern of the repo's `.gitattributes`.
LFS_SIZE_THRESHOLD = 10 * 1024 * 1024
SAMPLE_SIZE = 512

# The `.gitattributes` the Hub writes into every new model repo ("initial commit").
DEFAULT_GITATTRIBUTES = "".join(
    f"{pattern} filter=lfs diff=lfs merge=lfs -text\n"
    for pattern in (
        "*.7z",
        "*.arrow",
        "*.bin",
        "*.bz2",
        "*.ckpt",
        "*.ftz",
        "*.gz",
        "*.h5",
        "*.joblib",
        "*.lfs.*",
        "*.mlmodel",
        "*.model",
        "*.msgpack",
        "*.npy",
        "*.npz",
        "*.onnx",
        "*.ot",
        "*.parquet",
        "*.pb",
        "*.pickle",
        "*.pkl",
        "*.pt",
        "*.pth",
        "*.rar",
        "*.safetensors",
        "saved_model/**/*",
        "*.tar.*",
        "*.tar",
        "*.tflite",
        "*.tgz",
        "*.wasm",
        "*.xz",
        "*.zip",
        "*.zst",
        "*tfevents*",
    )
)

REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
URL_PREFIXES = {"model": "", "dataset": "datasets/", "space": "spaces/"}
REPO_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
# The same front-matter regex as huggingface_hub.repocard.REGEX_YAML_BLOCK.
YAML_BLOCK_RE = re.compile(r"^(\s*---[\r\n]+)([\S\s]*?)([\r\n]+---(\r\n|\n|$))")
INVALID_CREDENTIALS = "Invalid credentials in Authorization header"  # the exact text the client recognizes


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob: what the Hub calls a regular file's `oid` and sends as its ETag."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(oid: str, size: int) -> bytes:
    """The git-LFS pointer file that git stores in place of an LFS object."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n".encode()


def _iso(timestamp: float) -> str:
    # The format `huggingface_hub.utils.parse_datetime` expects: '%Y-%m-%dT%H:%M:%S.%fZ'.
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _front_matter(text: str):
    """README.md metadata as a dict, None without front matter; ValueError if it is not a YAML mapping."""
    match = YAML_BLOCK_RE.search(text)
    if match is None:
        return None
    try:
        import yaml  # PyYAML, a dependency of huggingface_hub; imported lazily to keep this module stdlib-only
    except ImportError:  # pragma: no cover - without PyYAML the metadata is simply not interpreted
        return None
    try:
        data = yaml.safe_load(match.group(2))
    except yaml.YAMLError as error:
        raise ValueError(f"Invalid YAML in the README.md front matter: {error}") from error
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"README.md metadata must be a YAML mapping, got {type(data).__name__}.")
    return data


class HubError(Exception):
    """An HTTP error answer. `code` goes into `X-Error-Code`, which the client maps to its exception types."""

    def __init__(self, status: int, message: str, code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers or {}


# ---------------------------------------------------------------------------------------------- storage


@dataclass(frozen=True)
class FileEntry:
    size: int  # the file's real size (for LFS files too, as the Hub reports it)
    blob_id: str  # git SHA-1 of the content, or of the LFS pointer for LFS files
    lfs_oid: str | None = None  # SHA-256 of the content for LFS files

    @property
    def pointer_size(self) -> int:
        return len(lfs_pointer(self.lfs_oid, self.size)) if self.lfs_oid else 0


@dataclass
class Commit:
    oid: str
    parents: list
    title: str
    message: str
    author: str
    date: float
    files: dict  # path -> FileEntry: the whole tree at this commit (repos here are small)


@dataclass
class Repo:
    repo_type: str
    repo_id: str
    private: bool
    created_at: float
    commits: dict = field(default_factory=dict)
    branches: dict = field(default_factory=dict)  # name -> commit oid
    tags: dict = field(default_factory=dict)
    pull_requests: dict = field(default_factory=dict)  # number -> commit oid (refs/pr/N)

    @property
    def namespace(self) -> str:
        return self.repo_id.split("/")[0]

    def resolve(self, revision: str) -> str | None:
        """Commit oid of a branch, tag, `refs/heads|tags/...`, `refs/pr/N` or a full commit id."""
        for prefix, refs in (("refs/heads/", self.branches), ("refs/tags/", self.tags)):
            if revision.startswith(prefix):
                return refs.get(revision[len(prefix) :])
        if revision in self.branches:
            return self.branches[revision]
        if revision in self.tags:
            return self.tags[revision]
        match = re.fullmatch(r"refs/pr/(\d+)", revision)
        if match:
            return self.pull_requests.get(int(match.group(1)))
        return revision if revision in self.commits else None

    def history(self, oid: str):
        """Commits from `oid` back to the first one, following first parents (newest first)."""
        while oid is not None:
            commit = self.commits[oid]
            yield commit
            oid = commit.parents[0] if commit.parents else None


class HubState:
    """Everything the server knows; every access holds `lock` (the server answers on several threads)."""

    def __init__(self, tokens: dict, orgs: dict, lfs_mode: str, multipart_chunk_size: int | None, page_size: int):
        if lfs_mode not in ("auto", "never", "always"):
            raise ValueError(f"`lfs_mode` must be 'auto', 'never' or 'always', got {lfs_mode!r}.")
        self.lock = threading.RLock()
        self.tokens = dict(tokens)
        self.orgs = {name: list(members) for name, members in orgs.items()}
        self.lfs_mode = lfs_mode
        self.multipart_chunk_size = multipart_chunk_size
        self.page_size = page_size
        self.repos: dict = {}  # (repo_type, repo_id) -> Repo
        self.blobs: dict = {}  # git sha1 -> bytes (regular files)
        self.lfs: dict = {}  # sha256 -> bytes (LFS objects, stored once uploaded and checked)
        self.lfs_parts: dict = {}  # (sha256, part number) -> bytes (multipart uploads in progress)
        self.requests: list = []  # RequestRecord of every request, for tests to inspect
        self._counter = itertools.count()

    def can_write(self, user: str | None, namespace: str) -> bool:
        return user is not None and (user == namespace or user in self.orgs.get(namespace, ()))

    def new_commit(self, repo: Repo, parents: list, title: str, message: str, author: str, files: dict) -> Commit:
        seed = f"{repo.repo_id}\0{parents}\0{title}\0{time.time_ns()}\0{next(self._counter)}"
        commit = Commit(hashlib.sha1(seed.encode()).hexdigest(), parents, title, message, author, time.time(), files)
        repo.commits[commit.oid] = commit
        return commit

    def needs_lfs(self, files: dict, path: str, size: int, sample: bytes) -> bool:
        """The server decides (preupload): regular git blob or LFS object."""
        if self.lfs_mode != "auto":
            return self.lfs_mode == "always"
        if size > LFS_SIZE_THRESHOLD or b"\0" in sample[:SAMPLE_SIZE]:
            return True
        entry = files.get(".gitattributes")
        if entry is None or entry.lfs_oid:
            return False
        for line in self.blobs[entry.blob_id].decode(errors="replace").splitlines():
            parts = line.split()
            if len(parts) >= 2 and "filter=lfs" in parts[1:] and _matches(parts[0], path):
                return True
        return False


def _matches(pattern: str, path: str) -> bool:
    # gitattributes/gitignore semantics, simplified: a pattern without "/" matches the file name at any depth.
    if "/" not in pattern.rstrip("/"):
        return fnmatch.fnmatchcase(path.rsplit("/", 1)[-1], pattern.rstrip("/")) or any(
            fnmatch.fnmatchcase(part, pattern.rstrip("/")) for part in path.split("/")[:-1]
        )
    pattern = pattern.lstrip("/")
    return fnmatch.fnmatchcase(path, pattern) or path.startswith(pattern.rstrip("/") + "/")


@dataclass
class RequestRecord:
    server: str  # "api" or "cdn"
    method: str
    path: str
    status: int
    authorized: bool  # whether an Authorization header was sent


# --------------------------------------------------------------------------------------------- handler

_REPO = r"(?P<type>models|datasets|spaces)/(?P<ns>[^/]+)/(?P<name>[^/]+)"
_GIT_REPO = r"(?:(?P<type>datasets|spaces)/)?(?P<ns>[^/]+)/(?P<name>[^/]+)"
_OID = r"(?P<oid>[0-9a-f]{64})"

API_ROUTES = [
    ("GET", r"/api/whoami-v2", "whoami"),
    ("GET", r"/api/agent-harnesses", "agent_harnesses"),
    ("POST", r"/api/validate-yaml", "validate_yaml"),
    ("POST", r"/api/repos/create", "create_repo"),
    ("DELETE", r"/api/repos/delete", "delete_repo"),
    ("GET", rf"/api/{_REPO}(?:/revision/(?P<rev>[^/]+))?", "repo_info"),
    ("GET", rf"/api/{_REPO}/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?", "tree"),
    ("POST", rf"/api/{_REPO}/paths-info/(?P<rev>[^/]+)", "paths_info"),
    ("GET", rf"/api/{_REPO}/refs", "refs"),
    ("GET", rf"/api/{_REPO}/commits/(?P<rev>[^/]+)", "list_commits"),
    ("POST", rf"/api/{_REPO}/branch/(?P<branch>[^/]+)", "create_branch"),
    ("DELETE", rf"/api/{_REPO}/branch/(?P<branch>[^/]+)", "delete_branch"),
    ("POST", rf"/api/{_REPO}/tag/(?P<rev>[^/]+)", "create_tag"),
    ("DELETE", rf"/api/{_REPO}/tag/(?P<tag>[^/]+)", "delete_tag"),
    ("PUT", rf"/api/{_REPO}/settings", "settings"),
    ("POST", rf"/api/{_REPO}/preupload/(?P<rev>[^/]+)", "preupload"),
    ("POST", rf"/api/{_REPO}/commit/(?P<rev>[^/]+)", "commit"),
    ("GET", rf"/api/{_REPO}/xet-(?:read|write)-token/(?P<rev>[^/]+)", "xet_token"),
    ("POST", rf"/{_GIT_REPO}\.git/info/lfs/objects/batch", "lfs_batch"),
    ("POST", rf"/{_GIT_REPO}\.git/info/lfs/objects/verify", "lfs_verify"),
    ("HEAD", rf"/{_GIT_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)", "resolve"),
    ("GET", rf"/{_GIT_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)", "resolve"),
]
# The "CDN": stores and serves LFS objects by SHA-256, without authentication (like pre-signed S3 URLs).
CDN_ROUTES = [
    ("GET", rf"/lfs-cdn/{_OID}", "cdn_get"),
    ("HEAD", rf"/lfs-cdn/{_OID}", "cdn_get"),
    ("PUT", rf"/lfs-upload/{_OID}", "lfs_upload"),
    ("PUT", rf"/lfs-part/{_OID}/(?P<part>\d+)", "lfs_part"),
    ("POST", rf"/lfs-complete/{_OID}", "lfs_complete"),
]


def _compile(routes):
    return [(method, re.compile(pattern + r"/?"), name) for method, pattern, name in routes]


class _Handler(BaseHTTPRequestHandler):
    """One request. `server.hub` is the LoopbackHub, `server.kind` is "api" or "cdn"."""

    protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects
    timeout = 60  # seconds an idle keep-alive connection may hold its thread
    server_version = "LoopbackHub/1.0"

    def do_GET(self):
        self._dispatch()

    do_HEAD = do_POST = do_PUT = do_DELETE = do_GET

    def log_message(self, format, *args):  # noqa: A002 - BaseHTTPRequestHandler's signature
        logger.debug("%s %s", self.server.kind, format % args)

    # -- plumbing

    @property
    def hub(self) -> LoopbackHub:
        return self.server.hub

    @property
    def state(self) -> HubState:
        return self.server.hub.state

    def _dispatch(self):
        url = urlsplit(self.path)
        self.query = parse_qs(url.query, keep_blank_values=True)
        self.body = self._read_body()
        status = 500
        try:
            routes = self.server.routes
            for method, pattern, name in routes:
                match = pattern.fullmatch(url.path)
                if match and method == self.command:
                    status = getattr(self, "h_" + name)(match)
                    break
            else:
                raise HubError(
                    404, f"No route for {self.command} {url.path} on the loopback Hub ({self.server.kind})."
                )
        except HubError as error:
            status = error.status
            headers = {"X-Error-Message": error.message, **error.headers}
            if error.code:
                headers["X-Error-Code"] = error.code
            self._send_json(error.status, {"error": error.message}, headers)
        except Exception as error:  # a bug in the server: say so in the answer instead of hanging the client
            logger.exception("loopback Hub failed on %s %s", self.command, self.path)
            status = 500
            self._send_json(500, {"error": f"loopback Hub internal error: {error!r}"})
        finally:
            with self.state.lock:
                self.state.requests.append(
                    RequestRecord(self.server.kind, self.command, self.path, status, "Authorization" in self.headers)
                )

    def _read_body(self) -> bytes:
        # The LFS PUT sends a file object, which httpx streams with `Transfer-Encoding: chunked`.
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, content_type="application/json"):
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, str(value))
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        return status

    def _send_json(self, status: int, data, headers: dict | None = None):
        return self._send(status, json.dumps(data).encode(), headers)

    def _json_body(self) -> dict:
        try:
            data = json.loads(self.body or b"{}")
        except json.JSONDecodeError as error:
            raise HubError(400, f"Request body is not JSON: {error}") from error
        if not isinstance(data, dict):
            raise HubError(400, "Request body must be a JSON object.")
        return data

    def _flag(self, name: str) -> bool:
        return (self.query.get(name) or ["0"])[-1].lower() in ("1", "true", "yes")

    # -- accounts and permissions

    def _user(self) -> str | None:
        """The authenticated user, None when anonymous; 401 for a token the server does not know."""
        header = self.headers.get("Authorization")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        user = self.state.tokens.get(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise HubError(401, INVALID_CREDENTIALS)
        return user

    def _repo(self, match, *, write: bool = False) -> tuple[Repo, str | None]:
        """The repo named in the URL, checked for read (or write) access by the caller."""
        user = self._user()
        repo_type = REPO_TYPES[match.group("type")] if match.group("type") else "model"
        repo_id = f"{unquote(match.group('ns'))}/{unquote(match.group('name'))}"
        with self.state.lock:
            repo = self.state.repos.get((repo_type, repo_id))
        visible = repo is not None and (not repo.private or self.state.can_write(user, repo.namespace))
        if not visible:
            # The Hub answers 401 to anonymous callers and 404 otherwise, and never reveals a private repo.
            raise HubError(
                401 if user is None else 404,
                f"Repository Not Found for url: {self.path}. (loopback Hub: no {repo_type} repo {repo_id!r}"
                f" visible to {user or 'anonymous callers'})",
                code="RepoNotFound",
            )
        if write and not self.state.can_write(user, repo.namespace):
            if user is None:
                raise HubError(401, f"You must be authenticated (send a token) to write to {repo_id}.")
            raise HubError(403, f"You don't have the rights to write to {repo_id} (authenticated as {user}).")
        return repo, user

    def _revision(self, repo: Repo, match, group="rev") -> Commit:
        revision = unquote(match.group(group))
        oid = repo.resolve(revision)
        if oid is None:
            raise HubError(404, f"Invalid rev id: {revision}", code="RevisionNotFound")
        return repo.commits[oid]

    def _repo_url(self, repo: Repo) -> str:
        return f"{self.hub.endpoint}/{URL_PREFIXES[repo.repo_type]}{repo.repo_id}"

    # -- account endpoints

    def h_whoami(self, match):
        user = self._user()
        if user is None:
            raise HubError(401, "You must be authenticated (send a token) to call whoami.")
        orgs = [{"name": name, "type": "org"} for name, members in self.state.orgs.items() if user in members]
        return self._send_json(
            200,
            {
                "type": "user",
                "id": user,
                "name": user,
                "fullname": user,
                "orgs": orgs,
                "auth": {"type": "access_token", "accessToken": {"displayName": "loopback", "role": "write"}},
            },
        )

    def h_agent_harnesses(self, match):
        return self._send_json(200, {"standardEnvVars": [], "harnesses": {}})

    def h_validate_yaml(self, match):
        try:
            _front_matter(self._json_body().get("content") or "")
        except ValueError as error:
            return self._send_json(400, {"errors": [{"message": str(error)}], "warnings": []})
        return self._send_json(200, {"errors": [], "warnings": []})

    # -- repos

    def h_create_repo(self, match):
        user = self._user()
        payload = self._json_body()
        name, namespace = payload.get("name") or "", payload.get("organization") or user
        repo_type = payload.get("type") or "model"
        if user is None:
            raise HubError(401, "You must be authenticated (send a token) to create a repo.")
        if repo_type not in URL_PREFIXES:
            raise HubError(400, f"Invalid repo type {repo_type!r}: use one of {sorted(URL_PREFIXES)}.")
        if not REPO_NAME_RE.match(name) or not REPO_NAME_RE.match(namespace):
            raise HubError(400, f"Invalid repo name {namespace}/{name}: use letters, digits, '-', '_' and '.'.")
        if not self.state.can_write(user, namespace):
            raise HubError(
                403, f"You don't have the rights to create a {repo_type} under the namespace {namespace!r}."
            )
        private = payload.get("visibility") == "private" if "visibility" in payload else bool(payload.get("private"))
        repo_id = f"{namespace}/{name}"
        with self.state.lock:
            repo = self.state.repos.get((repo_type, repo_id))
            if repo is not None:
                # `create_repo(exist_ok=True)` swallows the 409 and reads `url` from this body.
                return self._send_json(
                    409, {"error": f"You already created this {repo_type} repo", "url": self._repo_url(repo)}
                )
            repo = Repo(repo_type, repo_id, private, time.time())
            content = DEFAULT_GITATTRIBUTES.encode()
            self.state.blobs[git_blob_sha1(content)] = content
            first = self.state.new_commit(
                repo,
                [],
                "initial commit",
                "",
                user,
                {".gitattributes": FileEntry(len(content), git_blob_sha1(content))},
            )
            repo.branches["main"] = first.oid
            self.state.repos[(repo_type, repo_id)] = repo
        return self._send_json(200, {"url": self._repo_url(repo), "name": repo_id, "id": repo_id})

    def h_delete_repo(self, match):
        user = self._user()
        payload = self._json_body()
        repo_type = payload.get("type") or "model"
        repo_id = f"{payload.get('organization') or user}/{payload.get('name')}"
        with self.state.lock:
            repo = self.state.repos.get((repo_type, repo_id))
            if repo is None or (repo.private and not self.state.can_write(user, repo.namespace)):
                raise HubError(404, f"Repository Not Found: {repo_id}", code="RepoNotFound")
            if not self.state.can_write(user, repo.namespace):
                raise HubError(403, f"You don't have the rights to delete {repo_id}.")
            del self.state.repos[(repo_type, repo_id)]
        return self._send_json(200, {})

    def h_settings(self, match):
        repo, _ = self._repo(match, write=True)
        payload = self._json_body()
        with self.state.lock:
            if "visibility" in payload:
                repo.private = payload["visibility"] == "private"
            if "private" in payload:
                repo.private = bool(payload["private"])
        return self._send_json(200, {})

    def h_repo_info(self, match):
        repo, _ = self._repo(match)
        with self.state.lock:
            commit = self._revision(repo, match) if match.group("rev") else repo.commits[repo.branches["main"]]
            files = dict(commit.files)
            card = self._card_data(files)
            config = self._config(files)
        blobs = self._flag("blobs")
        siblings = []
        for path, entry in sorted(files.items()):
            sibling = {"rfilename": path}
            if blobs:
                sibling.update(size=entry.size, blobId=entry.blob_id)
                if entry.lfs_oid:
                    sibling["lfs"] = {"sha256": entry.lfs_oid, "size": entry.size, "pointerSize": entry.pointer_size}
            siblings.append(sibling)
        tags = list(card.get("tags") or []) if card else []
        for extra in ((card or {}).get("library_name"), (config or {}).get("model_type")):
            if extra and extra not in tags:
                tags.append(extra)
        info = {
            "_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "author": repo.namespace,
            "sha": commit.oid,
            "private": repo.private,
            "gated": False,
            "disabled": False,
            "lastModified": _iso(commit.date),
            "createdAt": _iso(repo.created_at),
            "downloads": 0,
            "likes": 0,
            "tags": tags,
            "siblings": siblings,
            "usedStorage": sum(entry.size for entry in files.values()),
        }
        if card is not None:
            info["cardData"] = card
            for key in ("library_name", "pipeline_tag"):
                if card.get(key):
                    info[key] = card[key]
        if config is not None:
            info["config"] = config
        return self._send_json(200, info)

    def _card_data(self, files: dict):
        entry = files.get("README.md")
        if entry is None or entry.lfs_oid:
            return None
        try:
            return _front_matter(self.state.blobs[entry.blob_id].decode(errors="replace"))
        except ValueError:
            return None

    def _config(self, files: dict):
        # The Hub exposes a few config.json fields (auto_map among them) in model_info(...).config.
        entry = files.get("config.json")
        if entry is None or entry.lfs_oid:
            return None
        try:
            config = json.loads(self.state.blobs[entry.blob_id])
        except ValueError:
            return None
        keys = ("architectures", "model_type", "auto_map", "custom_pipelines")
        return {key: config[key] for key in keys if key in config}

    # -- trees, refs and history

    def _tree_entries(self, repo: Repo, commit: Commit, paths, expand: bool) -> list:
        """Tree entries (files and directories) for `paths`, in the Hub's JSON shape."""
        entries = []
        for path in paths:
            entry = commit.files.get(path)
            if entry is not None:
                item = {"type": "file", "oid": entry.blob_id, "size": entry.size, "path": path}
                if entry.lfs_oid:
                    item["lfs"] = {"oid": entry.lfs_oid, "size": entry.size, "pointerSize": entry.pointer_size}
            else:
                children = sorted((p, e.blob_id) for p, e in commit.files.items() if p.startswith(path + "/"))
                item = {
                    "type": "directory",
                    "oid": hashlib.sha1(repr(children).encode()).hexdigest(),
                    "size": 0,
                    "path": path,
                }
            if expand:
                last = self._last_commit(repo, commit, path)
                item["lastCommit"] = {"id": last.oid, "title": last.title, "date": _iso(last.date)}
            entries.append(item)
        return entries

    @staticmethod
    def _last_commit(repo: Repo, commit: Commit, path: str) -> Commit:
        def snapshot(c):
            return {p: e for p, e in c.files.items() if p == path or p.startswith(path + "/")}

        for current in repo.history(commit.oid):
            parent = repo.commits[current.parents[0]] if current.parents else None
            if parent is None or snapshot(parent) != snapshot(current):
                return current
        return commit

    def _paginated(self, items: list):
        """One page of `items` plus a GitHub-style `Link` header to the next one (what `paginate` follows)."""
        start = int((self.query.get("cursor") or ["0"])[-1])
        page = items[start : start + self.state.page_size]
        headers = {}
        if start + self.state.page_size < len(items):
            query = {key: values[-1] for key, values in self.query.items()}
            query["cursor"] = str(start + self.state.page_size)
            url = f"{self.hub.endpoint}{urlsplit(self.path).path}?{urlencode(query)}"
            headers["Link"] = f'<{url}>; rel="next"'
        return self._send_json(200, page, headers)

    def h_tree(self, match):
        repo, _ = self._repo(match)
        root = unquote(match.group("path") or "").strip("/")
        recursive, expand = self._flag("recursive"), self._flag("expand")
        with self.state.lock:
            commit = self._revision(repo, match)
            directories = {"/".join(p.split("/")[:i]) for p in commit.files for i in range(1, p.count("/") + 1)}
            if root and root not in directories:
                raise HubError(
                    404,
                    f"Entry not found: {root!r} is not a folder at {commit.oid}",
                    code="EntryNotFound",
                    headers={"X-Repo-Commit": commit.oid},
                )
            prefix = root + "/" if root else ""
            paths = [p for p in sorted(set(commit.files) | directories) if p.startswith(prefix)]
            if not recursive:
                paths = [p for p in paths if "/" not in p[len(prefix) :]]
            entries = self._tree_entries(repo, commit, paths, expand)
        return self._paginated(entries)

    def h_paths_info(self, match):
        repo, _ = self._repo(match)
        form = parse_qs(self.body.decode(), keep_blank_values=True)
        expand = (form.get("expand") or ["false"])[-1].lower() in ("1", "true")
        with self.state.lock:
            commit = self._revision(repo, match)
            directories = {"/".join(p.split("/")[:i]) for p in commit.files for i in range(1, p.count("/") + 1)}
            wanted = [p.strip("/") for p in form.get("paths", [])]
            paths = [p for p in wanted if p in commit.files or p in directories]
            entries = self._tree_entries(repo, commit, paths, expand)
        return self._send_json(200, entries)

    def h_refs(self, match):
        repo, _ = self._repo(match)

        def refs(items, kind):
            return [{"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": oid} for name, oid in sorted(items)]

        with self.state.lock:
            data = {
                "branches": refs(repo.branches.items(), "heads"),
                "converts": [],
                "tags": refs(repo.tags.items(), "tags"),
            }
            if self._flag("include_prs"):
                data["pullRequests"] = [
                    {"name": f"refs/pr/{n}", "ref": f"refs/pr/{n}", "targetCommit": oid}
                    for n, oid in sorted(repo.pull_requests.items())
                ]
        return self._send_json(200, data)

    def h_list_commits(self, match):
        repo, _ = self._repo(match)
        with self.state.lock:
            commit = self._revision(repo, match)
            items = [
                {
                    "id": c.oid,
                    "title": c.title,
                    "message": c.message,
                    "date": _iso(c.date),
                    "authors": [{"user": c.author, "avatar": ""}],
                }
                for c in repo.history(commit.oid)
            ]
        return self._paginated(items)

    def h_create_branch(self, match):
        repo, _ = self._repo(match, write=True)
        branch = unquote(match.group("branch"))
        if branch.startswith("refs/") or not re.fullmatch(r"[A-Za-z0-9._/-]+", branch):
            raise HubError(400, f"Invalid reference for a branch: {branch!r}")
        start = self._json_body().get("startingPoint")
        with self.state.lock:
            if branch in repo.branches:
                raise HubError(409, f"Reference already exists: refs/heads/{branch}")
            oid = repo.resolve(start) if start else repo.branches["main"]
            if oid is None:
                raise HubError(404, f"Invalid rev id: {start}", code="RevisionNotFound")
            repo.branches[branch] = oid
        return self._send_json(200, {})

    def h_delete_branch(self, match):
        repo, _ = self._repo(match, write=True)
        branch = unquote(match.group("branch"))
        with self.state.lock:
            if branch == "main":
                raise HubError(403, "Cannot delete the default branch 'main'.")
            if repo.branches.pop(branch, None) is None:
                raise HubError(404, f"Invalid rev id: {branch}", code="RevisionNotFound")
        return self._send_json(200, {})

    def h_create_tag(self, match):
        repo, _ = self._repo(match, write=True)
        tag = self._json_body().get("tag") or ""
        with self.state.lock:
            commit = self._revision(repo, match)
            if tag in repo.tags:
                raise HubError(409, f"Tag already exists: {tag}")
            if not re.fullmatch(r"[A-Za-z0-9._/-]+", tag):
                raise HubError(400, f"Invalid tag name {tag!r}.")
            repo.tags[tag] = commit.oid
        return self._send_json(200, {})

    def h_delete_tag(self, match):
        repo, _ = self._repo(match, write=True)
        with self.state.lock:
            if repo.tags.pop(unquote(match.group("tag")), None) is None:
                raise HubError(404, f"Invalid rev id: {unquote(match.group('tag'))}", code="RevisionNotFound")
        return self._send_json(200, {})

    # -- uploads

    def _target(self, repo: Repo, match) -> tuple[Commit, str | None]:
        """Head commit a write goes on top of, and the branch ("main") or `refs/pr/N` to move (None for a new PR)."""
        revision = unquote(match.group("rev"))
        if self._flag("create_pr"):
            if revision not in repo.branches:
                raise HubError(404, f"Invalid rev id: {revision}", code="RevisionNotFound")
            return repo.commits[repo.branches[revision]], None
        pr = re.fullmatch(r"refs/pr/(\d+)", revision)
        branch = revision[len("refs/heads/") :] if revision.startswith("refs/heads/") else revision
        if pr and int(pr.group(1)) in repo.pull_requests:
            return repo.commits[repo.pull_requests[int(pr.group(1))]], revision
        if branch in repo.branches:
            return repo.commits[repo.branches[branch]], branch
        if repo.resolve(revision) is not None:
            raise HubError(400, f"Invalid rev id: {revision} is not a branch; commits go onto branches only.")
        raise HubError(404, f"Invalid rev id: {revision}", code="RevisionNotFound")

    def h_preupload(self, match):
        repo, _ = self._repo(match, write=True)
        payload = self._json_body()
        with self.state.lock:
            head, _ = self._target(repo, match)
            ignore = payload.get("gitIgnore")
            if ignore is None and ".gitignore" in head.files and not head.files[".gitignore"].lfs_oid:
                ignore = self.state.blobs[head.files[".gitignore"].blob_id].decode(errors="replace")
            patterns = [
                line.strip() for line in (ignore or "").splitlines() if line.strip() and not line.startswith("#")
            ]
            answers = []
            for item in payload.get("files", []):
                path, size = item["path"], int(item.get("size", 0))
                sample = base64.b64decode(item.get("sample") or "")
                lfs = self.state.needs_lfs(head.files, path, size, sample)
                remote = head.files.get(path)
                # `oid` lets the client skip unchanged files: sha256 for LFS files, git sha1 for regular ones.
                oid = None
                if remote is not None:
                    oid = remote.lfs_oid if lfs else (None if remote.lfs_oid else remote.blob_id)
                answers.append(
                    {
                        "path": path,
                        "uploadMode": "lfs" if lfs else "regular",
                        "shouldIgnore": any(_matches(p, path) for p in patterns),
                        "oid": oid,
                    }
                )
        return self._send_json(200, {"files": answers, "commitOid": head.oid})

    def h_commit(self, match):
        repo, user = self._repo(match, write=True)
        try:
            lines = [json.loads(line) for line in self.body.splitlines() if line.strip()]
        except json.JSONDecodeError as error:
            raise HubError(400, f"Commit body is not ndjson: {error}") from error
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, "The first ndjson line of a commit must be the header.")
        header = lines[0]["value"]
        with self.state.lock:
            head, ref = self._target(repo, match)
            parent = header.get("parentCommit")
            if parent and parent != head.oid:
                raise HubError(412, "A commit has happened since. Please refresh and try again.")
            files = dict(head.files)
            for line in lines[1:]:
                self._apply(head, files, line.get("key"), line.get("value") or {})
            commit = self.state.new_commit(
                repo, [head.oid], header.get("summary") or "", header.get("description") or "", user, files
            )
            answer = {
                "success": True,
                "commitOid": commit.oid,
                "hookOutput": "",
                "commitUrl": f"{self._repo_url(repo)}/commit/{commit.oid}",
            }
            if ref is None:  # ?create_pr=1: a new refs/pr/N holding the commit
                number = max(repo.pull_requests, default=0) + 1
                repo.pull_requests[number] = commit.oid
                answer["pullRequestUrl"] = f"{self._repo_url(repo)}/discussions/{number}"
            elif ref.startswith("refs/pr/"):
                repo.pull_requests[int(ref.rsplit("/", 1)[1])] = commit.oid
            else:
                repo.branches[ref] = commit.oid
        return self._send_json(200, answer)

    def _apply(self, head: Commit, files: dict, key: str, value: dict):
        path = (value.get("path") or "").strip("/")
        if not path or ".." in path.split("/"):
            raise HubError(400, f"Invalid path in commit: {value.get('path')!r}")
        if key == "file":
            data = base64.b64decode(value.get("content") or "")
            if data and self.state.needs_lfs(head.files, path, len(data), data[:SAMPLE_SIZE]):
                # The Hub rejects binary or big files that were not uploaded through LFS.
                raise HubError(
                    400,
                    f"Your push was rejected: {path!r} must be stored with LFS (binary, > 10 MB, "
                    "or matching a .gitattributes LFS pattern); ask preupload for its upload mode.",
                )
            self.state.blobs[git_blob_sha1(data)] = data
            files[path] = FileEntry(len(data), git_blob_sha1(data))
        elif key == "lfsFile":
            oid = value.get("oid") or ""
            if oid not in self.state.lfs:
                raise HubError(422, f"LFS object {oid} for {path!r} was not uploaded (or failed its sha256 check).")
            size = len(self.state.lfs[oid])
            if value.get("size") is not None and int(value["size"]) != size:
                raise HubError(422, f"LFS object {oid} has {size} bytes, the commit says {value['size']}.")
            files[path] = FileEntry(size, git_blob_sha1(lfs_pointer(oid, size)), oid)
        elif key == "deletedFile":
            if files.pop(path, None) is None:
                raise HubError(404, f"A file with this name doesn't exist: {path}", code="EntryNotFound")
        elif key == "deletedFolder":
            doomed = [p for p in files if p.startswith(path + "/")]
            if not doomed:
                raise HubError(404, f"A folder with this name doesn't exist: {path}", code="EntryNotFound")
            for p in doomed:
                del files[p]
        else:
            raise HubError(400, f"Unknown commit operation {key!r}.")

    def h_xet_token(self, match):
        raise HubError(
            501,
            "The loopback Hub has no Xet storage: run the client with HF_HUB_DISABLE_XET=1 "
            "(or start the hub with lfs_mode='never').",
        )

    # -- git-LFS

    def h_lfs_batch(self, match):
        repo, _ = self._repo(match, write=True)
        payload = self._json_body()
        if payload.get("operation") != "upload":
            raise HubError(400, "The loopback Hub's LFS batch API supports `operation: upload` only.")
        objects = []
        chunk = self.state.multipart_chunk_size
        verify = f"{self.hub.endpoint}/{URL_PREFIXES[repo.repo_type]}{repo.repo_id}.git/info/lfs/objects/verify"
        for obj in payload.get("objects", []):
            oid, size = obj["oid"], int(obj["size"])
            with self.state.lock:
                stored = oid in self.state.lfs
            if stored:  # no `actions`: the client skips the upload
                objects.append({"oid": oid, "size": size})
                continue
            if chunk and size > chunk:
                parts = -(-size // chunk)
                header = {
                    "chunk_size": str(chunk),
                    **{str(n): f"{self.hub.cdn}/lfs-part/{oid}/{n}" for n in range(1, parts + 1)},
                }
                upload = {"href": f"{self.hub.cdn}/lfs-complete/{oid}", "header": header}
            else:
                upload = {"href": f"{self.hub.cdn}/lfs-upload/{oid}"}
            objects.append(
                {
                    "oid": oid,
                    "size": size,
                    "authenticated": True,
                    "actions": {"upload": upload, "verify": {"href": verify}},
                }
            )
        return self._send(
            200,
            json.dumps({"transfer": "basic", "objects": objects}).encode(),
            content_type="application/vnd.git-lfs+json",
        )

    def h_lfs_verify(self, match):
        self._repo(match, write=True)
        payload = self._json_body()
        with self.state.lock:
            data = self.state.lfs.get(payload.get("oid"))
        if data is None or len(data) != payload.get("size"):
            raise HubError(404, f"LFS object {payload.get('oid')} of size {payload.get('size')} not found.")
        return self._send_json(200, {"success": True})

    def _store_lfs(self, oid: str, data: bytes):
        if hashlib.sha256(data).hexdigest() != oid:
            raise HubError(400, f"Uploaded content does not match its sha256 {oid}.")
        with self.state.lock:
            self.state.lfs[oid] = data

    def h_lfs_upload(self, match):
        self._store_lfs(match.group("oid"), self.body)
        return self._send(200)

    def h_lfs_part(self, match):
        key = (match.group("oid"), int(match.group("part")))
        with self.state.lock:
            self.state.lfs_parts[key] = self.body
        return self._send(200, headers={"ETag": f'"{hashlib.md5(self.body).hexdigest()}"'})

    def h_lfs_complete(self, match):
        oid = match.group("oid")
        parts = self._json_body().get("parts") or []
        with self.state.lock:
            try:
                data = b"".join(self.state.lfs_parts.pop((oid, int(p["partNumber"]))) for p in parts)
            except KeyError as error:
                raise HubError(400, f"Multipart upload of {oid}: part {error} was never uploaded.") from error
        self._store_lfs(oid, data)
        return self._send_json(200, {"success": True})

    # -- downloads

    def _send_bytes(self, data: bytes, headers: dict):
        """Content with `Range` support (the client resumes interrupted downloads with it)."""
        headers = {**headers, "Accept-Ranges": "bytes"}
        match = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", "").strip())
        if match and (match.group(1) or match.group(2)):
            if match.group(1):
                start = int(match.group(1))
                end = min(int(match.group(2)), len(data) - 1) if match.group(2) else len(data) - 1
            else:  # suffix range: the last N bytes
                start, end = max(len(data) - int(match.group(2)), 0), len(data) - 1
            if start >= len(data) and len(data) > 0:
                return self._send(416, headers={**headers, "Content-Range": f"bytes */{len(data)}"})
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            return self._send(206, data[start : end + 1], headers, "application/octet-stream")
        return self._send(200, data, headers, "application/octet-stream")

    def h_resolve(self, match):
        repo, _ = self._repo(match)
        path = unquote(match.group("path"))
        with self.state.lock:
            commit = self._revision(repo, match)
            entry = commit.files.get(path)
            if entry is None:
                # `X-Repo-Commit` lets the client cache the absence of the file (`.no_exist`).
                raise HubError(
                    404,
                    f"Entry not found: {path} at {commit.oid}",
                    code="EntryNotFound",
                    headers={"X-Repo-Commit": commit.oid},
                )
            data = None if entry.lfs_oid else self.state.blobs[entry.blob_id]
        headers = {"X-Repo-Commit": commit.oid, "ETag": f'"{entry.blob_id}"'}
        if entry.lfs_oid:
            # Like the Hub: redirect LFS files to the CDN (another origin), with the file's identity in X-Linked-*.
            # Never send X-Xet-Hash: it would switch the client to Xet downloads.
            location = f"{self.hub.cdn}/lfs-cdn/{entry.lfs_oid}?filename={quote(path.rsplit('/', 1)[-1])}"
            headers.update({"Location": location, "X-Linked-Etag": f'"{entry.lfs_oid}"', "X-Linked-Size": entry.size})
            return self._send(302, b"", headers)
        return self._send_bytes(data, headers)

    def h_cdn_get(self, match):
        with self.state.lock:
            data = self.state.lfs.get(match.group("oid"))
        if data is None:
            raise HubError(404, f"No LFS object {match.group('oid')}.")
        return self._send_bytes(data, {"ETag": f'"{match.group("oid")}"'})


# ------------------------------------------------------------------------------------------------ server


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a client that keeps a connection open must not block stop()
    allow_reuse_address = True


class LoopbackHub:
    """A Hub on loopback (API on 127.0.0.1, CDN on 127.0.0.2, free ports), in memory, for one test session.

    Args:
        tokens: access token -> user name. Default `{"hf_valid_tester": "tester", "hf_valid_other": "other"}`;
            the first one is `hub.token` / `hub.user`.
        orgs: organisation -> member user names. Default `{"test-org": ["tester"]}`.
        lfs_mode: "auto" (the Hub's rule: > 10 MB, binary, or a `.gitattributes` LFS pattern), "never" (every
            file inline: what a Xet-enabled client needs here) or "always". Can be changed while running.
        multipart_chunk_size: if set, LFS objects bigger than this are uploaded in parts (the Hub's multipart
            transfer), else in one PUT.
        page_size: entries per page of tree and commit listings (the client follows `Link` headers).
        max_seconds: stop by itself after this many seconds (a bound for scripts and stray processes).
    """

    def __init__(
        self,
        tokens: dict | None = None,
        orgs: dict | None = None,
        *,
        lfs_mode: str = "auto",
        multipart_chunk_size: int | None = None,
        page_size: int = 1000,
        max_seconds: float | None = None,
    ):
        tokens = {"hf_valid_tester": "tester", "hf_valid_other": "other"} if tokens is None else tokens
        if not tokens:
            raise ValueError("`tokens` must map at least one access token to a user name, e.g. {'hf_x': 'tester'}.")
        orgs = {"test-org": ["tester"]} if orgs is None else orgs
        if page_size < 1:
            raise ValueError(f"`page_size` must be a positive integer, got {page_size!r}.")
        self.state = HubState(tokens, orgs, lfs_mode, multipart_chunk_size, page_size)
        self.max_seconds = max_seconds
        self._servers: list = []
        self._timer: threading.Timer | None = None
        self.endpoint = self.cdn = None

    # Settings that tests flip while the hub runs.
    lfs_mode = property(lambda self: self.state.lfs_mode, lambda self, v: setattr(self.state, "lfs_mode", v))
    multipart_chunk_size = property(
        lambda self: self.state.multipart_chunk_size, lambda self, v: setattr(self.state, "multipart_chunk_size", v)
    )
    page_size = property(lambda self: self.state.page_size, lambda self, v: setattr(self.state, "page_size", v))

    @property
    def token(self) -> str:
        return next(iter(self.state.tokens))

    @property
    def user(self) -> str:
        return self.state.tokens[self.token]

    @property
    def requests(self) -> list:
        """Every request so far, as RequestRecord(server, method, path, status, authorized)."""
        with self.state.lock:
            return list(self.state.requests)

    def start(self) -> LoopbackHub:
        if self._servers:
            return self
        for kind, routes, host in (("api", API_ROUTES, HOST), ("cdn", CDN_ROUTES, CDN_HOST)):
            server = _Server((host, 0), _Handler)  # port 0: the OS picks a free port
            server.hub, server.kind, server.routes = self, kind, _compile(routes)
            threading.Thread(target=server.serve_forever, name=f"loopback-hub-{kind}", daemon=True).start()
            self._servers.append(server)
        self.endpoint = f"http://{HOST}:{self._servers[0].server_address[1]}"
        self.cdn = f"http://{CDN_HOST}:{self._servers[1].server_address[1]}"
        if self.max_seconds is not None:
            self._timer = threading.Timer(self.max_seconds, self.stop)
            self._timer.daemon = True
            self._timer.start()
        logger.info("loopback Hub at %s (CDN %s)", self.endpoint, self.cdn)
        return self

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        servers, self._servers = self._servers, []
        for server in servers:
            server.shutdown()
            server.server_close()

    @property
    def running(self) -> bool:
        return bool(self._servers)

    def __enter__(self) -> LoopbackHub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def client_env(self, hf_home, base: dict | None = None, *, offline: bool = False, quiet: bool = True) -> dict:
        """Environment for a process that plays a Hub user against this server.

        Starts from `base` (default `os.environ`) without any HF_*/HUGGINGFACE_*/TRANSFORMERS_* variable of the
        developer (their token, cache paths, endpoint), then points the client here. `hf_home` (cache, token file,
        remote-code modules) must be a fresh directory. `quiet` turns off progress bars (but the Trainer warns
        when it cannot show them: use quiet=False for a process that trains).
        """
        base = os.environ if base is None else base
        own = ("HF_", "HUGGINGFACE_", "HUGGING_FACE_", "TRANSFORMERS_")
        env = {k: v for k, v in base.items() if not k.startswith(own)}
        env.update(
            HF_ENDPOINT=self.endpoint,
            HF_TOKEN=self.token,
            HF_HOME=str(hf_home),
            HF_HUB_DISABLE_XET="1",
            HF_HUB_DISABLE_TELEMETRY="1",
            HF_HUB_DISABLE_UPDATE_CHECK="1",
            NO_PROXY="127.0.0.1,127.0.0.2,localhost",
            no_proxy="127.0.0.1,127.0.0.2,localhost",
        )
        if quiet:
            env["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
        if offline:
            env["HF_HUB_OFFLINE"] = "1"
        return env


# Variables that would send this process's client to the developer's own cache or token despite HF_HOME.
_PRIVATE_VARS = (
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "HF_ASSETS_CACHE",
    "HF_XET_CACHE",
    "HF_MODULES_CACHE",
    "TRANSFORMERS_CACHE",
    "HF_TOKEN_PATH",
    "HF_STORED_TOKENS_PATH",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_HUB_DISABLE_XET",
    "HF_ENDPOINT",
    "HF_TOKEN",
)


def start_session_hub(**kwargs) -> LoopbackHub:
    """Start a hub for a whole pytest session and point this process's Hub client at it.

    Call it at the top of `tests/conftest.py`, before anything imports huggingface_hub or transformers: their
    endpoint, cache paths and offline flag are frozen at import. Sets HF_ENDPOINT, HF_TOKEN (the hub's first
    token), a fresh temporary HF_HOME (removed at exit), HF_HUB_DISABLE_XET=1 and HF_HUB_OFFLINE=1, and drops
    the developer's cache/token variables. The session stays offline (a stray `from_pretrained("t5-small")`
    fails at once); a `hub` fixture turns the client online for one test with
    `monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)`, which is read at call time.
    The caller stops the hub (`pytest_unconfigure`); it also stops at exit. `kwargs` go to LoopbackHub.
    """
    already = [name for name in ("huggingface_hub", "transformers") if name in sys.modules]
    if already:
        raise RuntimeError(
            f"{already} imported before the loopback Hub was configured: HF_ENDPOINT would be ignored. Call "
            "start_session_hub() at the top of tests/conftest.py, before any import of them."
        )
    hub = LoopbackHub(**kwargs).start()
    hf_home = tempfile.mkdtemp(prefix="hf_home_")
    for name in _PRIVATE_VARS:
        os.environ.pop(name, None)
    os.environ.update(hub.client_env(hf_home, offline=True, quiet=False))
    atexit.register(shutil.rmtree, hf_home, ignore_errors=True)
    atexit.register(hub.stop)
    return hub


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-seconds", type=float, default=600.0, help="stop after this long (default 600)")
    parser.add_argument("--lfs-mode", default="auto", choices=["auto", "never", "always"])
    parser.add_argument(
        "--token",
        action="append",
        default=[],
        metavar="TOKEN=USER",
        help="accepted token and its user (repeatable); default hf_valid_tester=tester",
    )
    args = parser.parse_args(argv)
    tokens = dict(item.split("=", 1) for item in args.token) or None
    hub = LoopbackHub(tokens, lfs_mode=args.lfs_mode, max_seconds=args.max_seconds).start()
    print(json.dumps({"endpoint": hub.endpoint, "cdn": hub.cdn, "token": hub.token, "user": hub.user}), flush=True)
    try:
        while hub.running:
            time.sleep(0.2)
    except KeyboardInterrupt:
        hub.stop()


if __name__ == "__main__":
    main()
