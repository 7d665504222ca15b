"""Round trips through the real huggingface_hub and transformers clients against tests/support/hub_server.py.

Design: the server runs in threads of the pytest process (so a test can look at what it received: the request
log, the LFS store), and the client code runs in a fresh Python process that plays "the user". huggingface_hub
freezes HF_ENDPOINT, HF_HOME and the offline flag when it is first imported, so a client in the pytest process
would depend on import order and on whatever conftest runs first; a child process gets exactly the environment
we give it (`LoopbackHub.client_env`: our endpoint, our token, a fresh HF_HOME, no HF_HUB_OFFLINE, Xet off), so
this module runs the same alone and inside the full suite. Each child prints one JSON line with what it observed;
the assertions are here, against values computed independently (hashlib on the bytes we wrote, torch.equal on
tensors, the server's own store).
"""

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from helpers import TINY_SIZES
from support.hub_server import CDN_HOST, HOST, LFS_SIZE_THRESHOLD, LoopbackHub


TESTS_DIR = Path(__file__).resolve().parent

# Runs before each client snippet: helpers to report results and exceptions as JSON.
CLIENT_PRELUDE = '''
import hashlib, json, os, sys
ARGS = json.loads(os.environ["CLIENT_ARGS"])
R = {}

def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()

def catch(fn):
    """The exception `fn` raises, as JSON (None if it raises none)."""
    try:
        fn()
    except Exception as error:
        response = getattr(error, "response", None)
        return {"type": type(error).__name__, "mro": [c.__name__ for c in type(error).__mro__],
                "status": getattr(response, "status_code", None), "message": str(error)}
    return None
'''


@pytest.fixture(scope="module")
def server():
    with LoopbackHub(
        tokens={"hf_valid_tester": "tester", "hf_valid_other": "other"}, orgs={"test-org": ["tester"]}
    ) as hub:
        yield hub


def run_client(
    hub: LoopbackHub, tmp_path: Path, *snippets: str, xet: bool = False, timeout: float = 180, **args
) -> dict:
    """Run the code `snippets` in a fresh interpreter pointed at `hub` (fresh HF_HOME); return its `R` dict."""
    hf_home = tmp_path / f"hf_home_{uuid.uuid4().hex[:8]}"
    env = hub.client_env(hf_home)
    if xet:  # let the client use hf_xet: upload_folder then takes its pipelined, Xet-first code path
        env.pop("HF_HUB_DISABLE_XET")
    env["CLIENT_ARGS"] = json.dumps(args)
    script = "\n".join([CLIENT_PRELUDE, *map(textwrap.dedent, snippets), "print(json.dumps(R))"])
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        requests = "\n".join(f"  {q.server} {q.method} {q.status} {q.path}" for q in hub.requests[-30:])
        pytest.fail(
            f"client process failed (rc={proc.returncode}):\n{proc.stderr[-6000:]}\n"
            f"last requests the hub answered:\n{requests}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def unique(name: str) -> str:
    # The server lives for the whole module: every test uses its own repos.
    return f"{name}-{uuid.uuid4().hex[:8]}"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def head_files(hub: LoopbackHub, repo_id: str, revision: str = "main") -> dict:
    """path -> FileEntry at `revision`, read from the server's state (not through the client)."""
    with hub.state.lock:
        repo = hub.state.repos[("model", repo_id)]
        return dict(repo.commits[repo.resolve(revision)].files)


def stored_bytes(hub: LoopbackHub, entry) -> bytes:
    return hub.state.lfs[entry.lfs_oid] if entry.lfs_oid else hub.state.blobs[entry.blob_id]


# -------------------------------------------------------------------------------------------- accounts


def test_tokens_namespaces_and_auth_errors(server, tmp_path):
    mine, foreign, org = f"tester/{unique('auth')}", f"other/{unique('auth')}", f"test-org/{unique('auth')}"
    r = run_client(
        server,
        tmp_path,
        """
        from huggingface_hub import HfApi, hf_hub_download
        api = HfApi()  # HF_TOKEN = the tester's token
        R["whoami"] = api.whoami()["name"]
        R["whoami_orgs"] = [o["name"] for o in api.whoami()["orgs"]]
        R["whoami_wrong"] = catch(lambda: HfApi(token="hf_wrong").whoami())
        R["create_no_token"] = catch(lambda: api.create_repo(ARGS["mine"], token=False))
        R["create_wrong_token"] = catch(lambda: api.create_repo(ARGS["mine"], token="hf_wrong"))
        R["create_foreign"] = catch(lambda: api.create_repo(ARGS["foreign"]))
        R["url"] = api.create_repo(ARGS["mine"]).repo_id
        R["create_again"] = catch(lambda: api.create_repo(ARGS["mine"]))
        R["create_exist_ok"] = api.create_repo(ARGS["mine"], exist_ok=True).repo_id
        R["org_repo"] = api.create_repo(ARGS["org"]).repo_id
        # Another user's public repo: readable, not writable.
        HfApi(token="hf_valid_other").create_repo(ARGS["foreign"])
        R["foreign_read"] = api.model_info(ARGS["foreign"]).id
        R["foreign_write"] = catch(lambda: api.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt",
                                                           repo_id=ARGS["foreign"]))
        R["upload_no_token"] = catch(lambda: api.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt",
                                                             repo_id=ARGS["mine"], token=False))
        R["download_wrong_token"] = catch(lambda: hf_hub_download(ARGS["mine"], ".gitattributes", token="hf_wrong"))
        R["download_anonymous"] = os.path.basename(hf_hub_download(ARGS["mine"], ".gitattributes", token=False))
    """,
        mine=mine,
        foreign=foreign,
        org=org,
    )

    assert r["whoami"] == "tester" and r["whoami_orgs"] == ["test-org"]
    assert r["whoami_wrong"]["status"] == 401 and "HfHubHTTPError" in r["whoami_wrong"]["mro"]
    assert r["create_no_token"]["status"] == 401
    assert r["create_wrong_token"]["status"] == 401 and "Invalid credentials" in r["create_wrong_token"]["message"]
    assert r["create_foreign"]["status"] == 403
    assert r["url"] == r["create_exist_ok"] == mine and r["org_repo"] == org
    assert r["create_again"]["status"] == 409
    assert r["foreign_read"] == foreign
    assert r["foreign_write"]["status"] == 403
    assert r["upload_no_token"]["status"] == 401
    # A wrong token is an auth error, not a "repository not found".
    assert r["download_wrong_token"]["status"] == 401
    assert "RepositoryNotFoundError" not in r["download_wrong_token"]["mro"]
    assert r["download_anonymous"] == ".gitattributes"
    # Nothing was written where it was refused.
    assert set(head_files(server, foreign)) == {".gitattributes"}
    assert set(head_files(server, mine)) == {".gitattributes"}


def test_private_repo_is_invisible_without_access(server, tmp_path):
    repo = f"tester/{unique('private')}"
    r = run_client(
        server,
        tmp_path,
        """
        import tempfile
        from huggingface_hub import HfApi, hf_hub_download
        api = HfApi()
        api.create_repo(ARGS["repo"], private=True)
        api.upload_file(path_or_fileobj=b"secret", path_in_repo="secret.txt", repo_id=ARGS["repo"])
        R["owner_private"] = api.model_info(ARGS["repo"]).private
        R["owner_reads"] = open(hf_hub_download(ARGS["repo"], "secret.txt")).read()
        R["anonymous_info"] = catch(lambda: api.model_info(ARGS["repo"], token=False))
        R["anonymous_download"] = catch(lambda: hf_hub_download(ARGS["repo"], "secret.txt", token=False,
                                                                cache_dir=tempfile.mkdtemp()))
        R["other_user_info"] = catch(lambda: api.model_info(ARGS["repo"], token="hf_valid_other"))
        R["missing_repo"] = catch(lambda: api.model_info("tester/does-not-exist"))
        R["missing_file"] = catch(lambda: hf_hub_download(ARGS["repo"], "nope.txt"))
        R["missing_revision"] = catch(lambda: hf_hub_download(ARGS["repo"], "secret.txt", revision="nope"))
        api.update_repo_settings(ARGS["repo"], private=False)
        R["public_now"] = api.model_info(ARGS["repo"], token=False).private
    """,
        repo=repo,
    )

    assert r["owner_private"] is True and r["owner_reads"] == "secret"
    for key, status in (
        ("anonymous_info", 401),
        ("anonymous_download", 401),
        ("other_user_info", 404),
        ("missing_repo", 404),
    ):
        assert "RepositoryNotFoundError" in r[key]["mro"], key
        assert r[key]["status"] == status, key
    assert "EntryNotFoundError" in r["missing_file"]["mro"]
    assert "RevisionNotFoundError" in r["missing_revision"]["mro"]
    assert r["public_now"] is False


# --------------------------------------------------------------------------------------- upload/download


def _write_folder(root: Path) -> dict:
    """Files that exercise each of the Hub's upload-mode rules; returns path -> bytes."""
    files = {
        "README.md": b"---\nlicense: apache-2.0\ntags:\n- loopback\n---\n# A test repo\n",  # regular
        "sub/dir/notes.txt": b"nested text file\n",  # regular, in a folder
        "empty.txt": b"",  # empty: always inline
        "big.txt": b"0123456789abcdef\n" * (LFS_SIZE_THRESHOLD // 17 + 10),  # LFS by size (> 10 MB), plain text
        "weights.bin": b"not binary, but *.bin is an LFS pattern\n" * 10,  # LFS by .gitattributes
        "blob.dat": b"binary\0content" * 40,  # LFS because of a NUL byte in the first 512 bytes
    }
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    return files


DOWNLOAD_ALL = """
    import pathlib, tempfile
    from huggingface_hub import HfApi, hf_hub_download, snapshot_download
    api = HfApi()
    R["single"] = {p: sha256(hf_hub_download(ARGS["repo"], p)) for p in ARGS["paths"]}
    snapshot = pathlib.Path(snapshot_download(ARGS["repo"], cache_dir=tempfile.mkdtemp()))  # a cold cache
    R["snapshot"] = {str(p.relative_to(snapshot)): sha256(p) for p in snapshot.rglob("*") if p.is_file()}
    info = api.model_info(ARGS["repo"], files_metadata=True)
    R["sha"] = info.sha
    R["lfs"] = {s.rfilename: (s.lfs.sha256 if s.lfs else None) for s in info.siblings}
    R["card_license"] = info.card_data.license if info.card_data else None
    R["tree"] = sorted(f.path for f in api.list_repo_tree(ARGS["repo"], recursive=True))
"""


def test_upload_folder_lfs_rules_and_byte_identical_downloads(server, tmp_path):
    repo = f"tester/{unique('upload')}"
    folder = tmp_path / "folder"
    files = _write_folder(folder)
    start = len(server.requests)
    r = run_client(
        server,
        tmp_path,
        """
        from huggingface_hub import HfApi
        HfApi().create_repo(ARGS["repo"])
        R["commit"] = HfApi().upload_folder(repo_id=ARGS["repo"], folder_path=ARGS["folder"]).oid
    """,
        DOWNLOAD_ALL,
        repo=repo,
        folder=str(folder),
        paths=sorted(files),
    )

    expected = {path: sha256(data) for path, data in files.items()}
    assert r["single"] == expected
    assert {p: h for p, h in r["snapshot"].items() if p != ".gitattributes"} == expected
    assert r["sha"] == r["commit"]
    lfs = {"big.txt", "weights.bin", "blob.dat"}
    assert {p for p, oid in r["lfs"].items() if oid} == lfs
    assert all(r["lfs"][p] == expected[p] for p in lfs)  # the LFS oid is the content's sha256
    assert r["card_license"] == "apache-2.0"
    assert r["tree"] == sorted({*files, ".gitattributes", "sub", "sub/dir"})
    # The server stored exactly these bytes, each under the mode its rule gives.
    stored = head_files(server, repo)
    for path, data in files.items():
        assert bool(stored[path].lfs_oid) == (path in lfs), path
        assert stored_bytes(server, stored[path]) == data, path
    # LFS went through the batch API to the second origin, and downloads from that origin carried no token.
    log = server.requests[start:]
    assert sum(1 for q in log if q.server == "cdn" and q.method == "PUT" and q.status == 200) == len(lfs)
    cdn_gets = [q for q in log if q.server == "cdn" and q.method == "GET"]
    assert cdn_gets and not any(q.authorized for q in cdn_gets)
    assert not any("/xet-" in q.path for q in log)


def test_upload_folder_with_xet_client_and_inline_files(server, tmp_path, monkeypatch):
    # With hf_xet usable, upload_folder takes another code path (the pipelined upload); a hub that answers
    # "regular" for every file never sends that client to Xet.
    repo = f"tester/{unique('pipelined')}"
    folder = tmp_path / "folder"
    files = {"model.safetensors": b"\0\1\2fake weights" * 100, "config.json": b'{"a": 1}'}
    folder.mkdir()
    for path, data in files.items():
        (folder / path).write_bytes(data)
    monkeypatch.setattr(server, "lfs_mode", "never")
    start = len(server.requests)
    r = run_client(
        server,
        tmp_path,
        """
        from huggingface_hub import HfApi
        from huggingface_hub.utils._runtime import is_xet_available
        R["xet"] = is_xet_available()
        HfApi().create_repo(ARGS["repo"])
        HfApi().upload_folder(repo_id=ARGS["repo"], folder_path=ARGS["folder"])
    """,
        DOWNLOAD_ALL,
        xet=True,
        repo=repo,
        folder=str(folder),
        paths=sorted(files),
    )

    assert r["xet"] is True
    assert r["single"] == {path: sha256(data) for path, data in files.items()}
    assert not any(r["lfs"].values())
    assert not any("/xet-" in q.path for q in server.requests[start:])


def test_multipart_lfs_upload(server, tmp_path, monkeypatch):
    repo = f"tester/{unique('multipart')}"
    data = os.urandom(2_500_000)
    (tmp_path / "big.bin").write_bytes(data)
    monkeypatch.setattr(server, "multipart_chunk_size", 1_000_000)
    start = len(server.requests)
    r = run_client(
        server,
        tmp_path,
        """
        from huggingface_hub import HfApi, hf_hub_download
        api = HfApi()
        api.create_repo(ARGS["repo"])
        api.upload_file(path_or_fileobj=ARGS["file"], path_in_repo="big.bin", repo_id=ARGS["repo"])
        R["sha"] = sha256(hf_hub_download(ARGS["repo"], "big.bin"))
    """,
        repo=repo,
        file=str(tmp_path / "big.bin"),
    )

    assert r["sha"] == sha256(data)
    log = server.requests[start:]
    assert sum(1 for q in log if q.method == "PUT" and q.path.startswith("/lfs-part/")) == 3
    assert sum(1 for q in log if q.method == "POST" and q.path.startswith("/lfs-complete/")) == 1


# ------------------------------------------------------------------------------------- revisions


def test_branches_tags_pull_requests_and_pagination(server, tmp_path, monkeypatch):
    repo = f"tester/{unique('revisions')}"
    monkeypatch.setattr(server, "page_size", 2)  # listings span several pages: the client must follow `Link`
    start = len(server.requests)
    r = run_client(
        server,
        tmp_path,
        """
        from huggingface_hub import HfApi, hf_hub_download
        api = HfApi()
        repo = ARGS["repo"]
        def read(path, revision=None):
            return open(hf_hub_download(repo, path, revision=revision)).read()
        def put(data, path, **kwargs):
            return api.upload_file(path_or_fileobj=data.encode(), path_in_repo=path, repo_id=repo, **kwargs)

        api.create_repo(repo)
        first = put("main v1", "a.txt")
        api.create_branch(repo, branch="dev")
        R["branch_again"] = catch(lambda: api.create_branch(repo, branch="dev"))
        dev = put("dev v2", "a.txt", revision="dev", commit_message="change a on dev")
        put("only on dev", "dir/dev_only.txt", revision="dev")
        R["main_a"], R["dev_a"] = read("a.txt"), read("a.txt", "dev")
        R["dev_only_on_main"] = catch(lambda: read("dir/dev_only.txt"))
        R["commit_sha_read"] = read("a.txt", first.oid)
        api.create_tag(repo, tag="v1", revision=first.oid)
        R["tag_read"] = read("a.txt", "v1")
        refs = api.list_repo_refs(repo)
        R["branches"] = sorted(b.name for b in refs.branches)
        R["tags"] = [t.name for t in refs.tags]
        R["dev_titles"] = [c.title for c in api.list_repo_commits(repo, revision="dev")]
        R["dev_tree"] = sorted(f.path for f in api.list_repo_tree(repo, revision="dev", recursive=True))
        R["dev_paths_info"] = sorted(p.path for p in api.get_paths_info(repo, ["a.txt", "dir", "nope"], revision="dev"))
        R["stale_parent"] = catch(lambda: put("x", "a.txt", revision="dev", parent_commit=first.oid))
        R["unknown_branch"] = catch(lambda: put("x", "a.txt", revision="no-such-branch"))
        pr = put("from a PR", "a.txt", create_pr=True)
        R["pr_revision"] = pr.pr_revision
        R["pr_read"], R["main_after_pr"] = read("a.txt", pr.pr_revision), read("a.txt")
        api.delete_file("dir/dev_only.txt", repo, revision="dev")
        R["deleted"] = catch(lambda: hf_hub_download(repo, "dir/dev_only.txt", revision="dev", force_download=True))
    """,
        repo=repo,
    )

    assert r["branch_again"]["status"] == 409
    assert (r["main_a"], r["dev_a"]) == ("main v1", "dev v2")
    assert "EntryNotFoundError" in r["dev_only_on_main"]["mro"]
    assert r["commit_sha_read"] == r["tag_read"] == "main v1"
    assert r["branches"] == ["dev", "main"] and r["tags"] == ["v1"]
    assert r["dev_titles"] == [
        "Upload dir/dev_only.txt with huggingface_hub",
        "change a on dev",
        "Upload a.txt with huggingface_hub",
        "initial commit",
    ]
    assert r["dev_tree"] == [".gitattributes", "a.txt", "dir", "dir/dev_only.txt"]
    assert r["dev_paths_info"] == ["a.txt", "dir"]
    assert r["stale_parent"]["status"] == 412
    assert "RevisionNotFoundError" in r["unknown_branch"]["mro"]
    assert r["pr_revision"] == "refs/pr/1" and r["pr_read"] == "from a PR" and r["main_after_pr"] == "main v1"
    assert "EntryNotFoundError" in r["deleted"]["mro"]
    # Pagination was really used: 5 tree entries and 4 commits at 2 per page.
    assert any("cursor=" in q.path and "/tree/" in q.path for q in server.requests[start:])
    assert any("cursor=" in q.path and "/commits/" in q.path for q in server.requests[start:])


# ------------------------------------------------------------------------------------- transformers


def test_marian_push_to_hub_and_from_pretrained(server, tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    repo = f"tester/{unique('marian')}"
    out = tmp_path / "out"
    out.mkdir()
    r = run_client(
        server,
        tmp_path,
        """
        import tempfile
        import torch
        from safetensors.torch import save_file
        from transformers import AutoModelForSeq2SeqLM, MarianConfig, MarianMTModel

        out, repo = ARGS["out"], ARGS["repo"]
        config = MarianConfig(vocab_size=64, **ARGS["sizes"], max_position_embeddings=32, pad_token_id=0,
                              eos_token_id=2, decoder_start_token_id=0)
        inputs = {"input_ids": torch.tensor([[5, 6, 7, 2]]), "decoder_input_ids": torch.tensor([[0, 9, 10]])}

        def dump(model, name):
            # Every tensor of the state dict plus the logits on a fixed input, for the test process to compare.
            model.eval()
            tensors = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
            with torch.no_grad():
                tensors["__logits__"] = model(**inputs).logits
            save_file(tensors, f"{out}/{name}.safetensors")

        torch.manual_seed(0)
        pushed = MarianMTModel(config)
        dump(pushed, "pushed_main")
        pushed.save_pretrained(f"{out}/local_main")
        R["commit_main"] = pushed.push_to_hub(repo).oid
        dump(MarianMTModel.from_pretrained(repo, cache_dir=tempfile.mkdtemp()), "loaded_main")
        auto = AutoModelForSeq2SeqLM.from_pretrained(repo, cache_dir=tempfile.mkdtemp())
        R["auto_class"] = type(auto).__name__

        torch.manual_seed(1)
        pushed_dev = MarianMTModel(config)
        dump(pushed_dev, "pushed_dev")
        pushed_dev.push_to_hub(repo, revision="dev")
        dump(MarianMTModel.from_pretrained(repo, revision="dev", cache_dir=tempfile.mkdtemp()), "loaded_dev")

        from huggingface_hub import HfApi
        info = HfApi().model_info(repo)
        R["card_library"] = info.card_data.library_name
        R["config_model_type"] = info.config["model_type"]
    """,
        out=str(out),
        repo=repo,
        sizes=dict(TINY_SIZES, d_model=16, encoder_ffn_dim=32, decoder_ffn_dim=32),
    )

    assert r["auto_class"] == "MarianMTModel"
    assert r["card_library"] == "transformers" and r["config_model_type"] == "marian"

    def assert_same(a, b):
        x, y = load_file(out / f"{a}.safetensors"), load_file(out / f"{b}.safetensors")
        assert x.keys() == y.keys()
        for key in x:
            assert torch.equal(x[key], y[key]), (a, b, key)

    assert_same("pushed_main", "loaded_main")
    assert_same("pushed_dev", "loaded_dev")
    assert not torch.equal(
        load_file(out / "pushed_main.safetensors")["__logits__"],
        load_file(out / "pushed_dev.safetensors")["__logits__"],
    )
    # After the branch push, main still holds what save_pretrained wrote locally (weights stored as LFS).
    files = head_files(server, repo)
    assert {"config.json", "generation_config.json", "model.safetensors", "README.md", ".gitattributes"} <= set(files)
    assert files["model.safetensors"].lfs_oid == sha256((out / "local_main" / "model.safetensors").read_bytes())
    assert head_files(server, repo, "dev")["model.safetensors"].lfs_oid != files["model.safetensors"].lfs_oid
    assert json.loads(stored_bytes(server, files["config.json"])) == json.loads(
        (out / "local_main" / "config.json").read_text()
    )
    with server.state.lock:
        repo_state = server.state.repos[("model", repo)]
        assert repo_state.branches["main"] == r["commit_main"]
        assert repo_state.branches["dev"] != r["commit_main"]


# ------------------------------------------------------------------------------------------ server


def _get(url: str):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy
    with opener.open(url, timeout=5) as response:
        return response.status, json.loads(response.read())


def test_binds_loopback_only_and_stops():
    hub = LoopbackHub().start()
    try:
        assert hub.endpoint.startswith(f"http://{HOST}:") and hub.cdn.startswith(f"http://{CDN_HOST}:")
        assert hub.endpoint != hub.cdn
        assert [server.server_address[0] for server in hub._servers] == [HOST, CDN_HOST]
        assert all(address.startswith("127.") for address in (HOST, CDN_HOST))  # loopback only
        assert _get(f"{hub.endpoint}/api/agent-harnesses") == (200, {"standardEnvVars": [], "harnesses": {}})
    finally:
        hub.stop()
    with pytest.raises(urllib.error.URLError):
        _get(f"{hub.endpoint}/api/agent-harnesses")


def test_max_seconds_bounds_the_server():
    hub = LoopbackHub(max_seconds=0.3).start()
    deadline = time.monotonic() + 5
    while hub.running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not hub.running


def test_script_mode_prints_endpoint_and_exits_at_its_bound():
    proc = subprocess.Popen(
        [sys.executable, str(TESTS_DIR / "support" / "hub_server.py"), "--max-seconds", "1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        info = json.loads(proc.stdout.readline())
        assert info["user"] == "tester"
        status, whoami = _get_with_token(f"{info['endpoint']}/api/whoami-v2", info["token"])
        assert status == 200 and whoami["name"] == "tester"
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _get_with_token(url: str, token: str):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with opener.open(request, timeout=5) as response:
        return response.status, json.loads(response.read())


def test_start_session_hub_configures_a_client_imported_after_it(tmp_path):
    # What tests/conftest.py does: start the hub before any HF import, offline by default, online on demand.
    code = textwrap.dedent("""
        import json, os, sys
        sys.path.insert(0, sys.argv[1])
        from support.hub_server import start_session_hub
        hub = start_session_hub()
        from huggingface_hub import HfApi, constants
        from huggingface_hub.errors import OfflineModeIsEnabled
        result = {"endpoint_ok": constants.ENDPOINT == hub.endpoint, "offline": constants.HF_HUB_OFFLINE,
                  "home_ok": constants.HF_HOME == os.environ["HF_HOME"], "xet_disabled": constants.HF_HUB_DISABLE_XET}
        try:
            HfApi().whoami()
        except OfflineModeIsEnabled:
            result["blocked_offline"] = True
        constants.HF_HUB_OFFLINE = False  # what the `hub` fixture does with monkeypatch
        result["whoami"] = HfApi().whoami()["name"]
        try:
            start_session_hub()
        except RuntimeError as error:
            result["late_call"] = str(error)
        hub.stop()
        print(json.dumps(result))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env["HF_TOKEN"] = "hf_developers_real_token"  # must not leak into the session
    proc = subprocess.run(
        [sys.executable, "-c", code, str(TESTS_DIR)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["endpoint_ok"] and result["home_ok"] and result["xet_disabled"] and result["offline"]
    assert result["blocked_offline"] is True
    assert result["whoami"] == "tester"
    assert "imported before the loopback Hub" in result["late_call"]


def test_rejects_bad_settings():
    with pytest.raises(ValueError, match="lfs_mode"):
        LoopbackHub(lfs_mode="sometimes")
    with pytest.raises(ValueError, match="tokens"):
        LoopbackHub(tokens={})
