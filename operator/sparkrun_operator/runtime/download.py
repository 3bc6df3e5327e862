"""The ModelCache downloader: a Hub revision into the HF hub layout on a cache volume.

``python -m sparkrun_operator.runtime.download {download,inspect,repair} --root DIR --repo ORG/NAME``
(run in the download Job of a ``ModelCache``; exit codes in :mod:`sparkrun_operator.runtime.hferrors`).

1. resolve the revision (branch, tag or commit) to a full commit with the real ``huggingface_hub``
   and write the manifest ``<root>/sparkrun/manifests/<folder>/<commit>.json`` (complete: false);
2. per file (allow/ignore patterns applied as ``snapshot_download`` does): skip a blob already
   verified, verify a blob already present, continue an orphaned ``*.incomplete`` left by a killed
   process with a Range request (the library's ``http_get``), else ``hf_hub_download`` it;
3. verify each blob (size, or sha256 for LFS / git blob sha1 for regular files), re-fetch once
   what fails, then write ``refs/<revision>`` and the complete manifest.

Progress goes to sinks (JSON lines on stdout, a status file) at a bounded rate. The token comes
from ``--token-file`` or ``HF_TOKEN`` and is never printed or written. Xet is disabled: a plain
HTTP download lands in the classic ``blobs/``/``snapshots/`` layout that ``HF_HUB_OFFLINE=1``
engines read with ``HF_HOME=<root>``.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

os.environ["HF_HUB_DISABLE_XET"] = "1"

import filelock  # after HF_HUB_DISABLE_XET: huggingface_hub reads it at import
import huggingface_hub
from huggingface_hub import constants as hf_constants
from huggingface_hub.file_download import http_get
from huggingface_hub.utils._headers import build_hf_headers
from huggingface_hub.utils._paths import filter_repo_objects
from huggingface_hub.utils.tqdm import disable_progress_bars

from sparkrun_operator.api.clip import MESSAGE_MAX, clip
from sparkrun_operator.runtime import hferrors, hubanswer, modelshape
from sparkrun_operator.runtime.downloadcli import allowed_token, daemon_manifest, parser
from sparkrun_operator.runtime.hfcache import (
    LEVELS,
    CacheLayout,
    FileEntry,
    InspectReport,
    Manifest,
    Result,
    Selection,
    VerifiedBlobs,
    VerifyLevel,
    check_file,
    hash_file,
    now,
    select_files,
)
from sparkrun_operator.runtime.progress import Phase, Progress, Reporter

hf_constants.HF_HUB_DISABLE_XET = True  # also when huggingface_hub was imported before us
# http_get writes a chunk only once it has all of it: with the default 10 MiB chunks a killed pod
# loses up to 10 MiB per file in flight; 1 MiB chunks keep the orphan close to what was received.
# (It is also faster: joining 10 MiB chunks costs more than it saves; see docs/performance.md.)
CHUNK_SIZE = 1024 * 1024
hf_constants.DOWNLOAD_CHUNK_SIZE = CHUNK_SIZE
DEFAULT_ENDPOINT = "https://huggingface.co"
How = Literal["verified", "present", "resumed", "fetched"]
T = TypeVar("T")


@dataclass(frozen=True)
class Source:
    """``spec.source.huggingFace`` of a ModelCache."""

    repo: str
    revision: str = "main"
    endpoint: str | None = None
    repo_type: str = "model"
    allow_patterns: tuple[str, ...] = ()
    ignore_patterns: tuple[str, ...] = ()

    @property
    def endpoint_url(self) -> str:
        return (self.endpoint or hf_constants.ENDPOINT or DEFAULT_ENDPOINT).rstrip("/")


def _entries(manifest_files: Sequence[Any]) -> list[FileEntry]:
    out = []
    for sibling in manifest_files:
        lfs = sibling.lfs
        size = sibling.size if sibling.size is not None else (lfs.size if lfs is not None else 0)
        out.append(FileEntry(sibling.rfilename, int(size), str(sibling.blob_id), lfs.sha256 if lfs else None))
    return out


class Downloader:
    """Downloads, verifies, inspects and repairs one repository revision under ``root``."""

    def __init__(
        self,
        root: Path,
        source: Source,
        *,
        token: str | None = None,
        verify: VerifyLevel = "size",
        workers: int = 8,
        reporter: Reporter | None = None,
        attempts: int = 5,
    ) -> None:
        self.root = Path(root)
        self.source = source
        self.verify: VerifyLevel = verify
        self.workers = max(1, workers)
        self.reporter = reporter or Reporter([])
        self.layout = CacheLayout(self.root, source.repo, source.repo_type)
        self._token = token
        self.attempts = attempts
        self._lock = threading.Lock()
        self._done_bytes = 0
        self._done_files = 0
        self._fetched = 0
        self._inflight: dict[str, int] = {}
        #: Bytes an in-flight blob already had when this process started on it (a killed pod's
        #: orphan): not fetched now, so not part of the rate.
        self._inflight_base: dict[str, int] = {}
        self._phase: Phase = "Resolving"
        self._commit: str | None = None
        self._total = (0, 0)

    # -- errors and progress --------------------------------------------------------------------

    @property
    def _token_arg(self) -> str | bool:
        return self._token if self._token else False

    def _fail(self, exc: BaseException, revision: str | None = None) -> hferrors.DownloadError:
        err = hferrors.classify(
            exc,
            repo=self.source.repo,
            revision=revision or self.source.revision,
            endpoint=self.source.endpoint_url,
            has_token=bool(self._token),
        )
        return hferrors.DownloadError(err.code, self.scrub(err.message))

    def _retry(self, fn: Callable[[], T]) -> T:
        return hferrors.with_retries(fn, attempts=self.attempts)

    def scrub(self, text: str) -> str:
        return text.replace(self._token, "***") if self._token else text

    def _event(self, message: str = "") -> Progress:
        with self._lock:
            partial = sum(self._inflight.values())
            received = sum(max(0, n - self._inflight_base.get(e, 0)) for e, n in self._inflight.items())
            return Progress(
                phase=self._phase,
                repo=self.source.repo,
                revision=self.source.revision,
                commit=self._commit,
                bytes_done=self._done_bytes + partial,
                bytes_total=self._total[1],
                files_done=self._done_files,
                files_total=self._total[0],
                bytes_fetched=self._fetched + received,
                message=self.scrub(message),
            )

    def _report(self, phase: Phase | None = None, message: str = "", *, force: bool = False) -> None:
        if phase is not None:
            self._phase = phase
        self.reporter.update(self._event(message), force=force)

    def _watch(self, stop: threading.Event) -> None:
        """Sample the sizes of partial blobs so that byte progress moves inside a file."""
        period = min(0.5, max(0.05, self.reporter.interval / 2))
        while not stop.wait(period):
            with self._lock:
                etags = list(self._inflight)
            for etag in etags:
                sizes = []
                for path in self.layout.incomplete(etag):
                    with contextlib.suppress(OSError):
                        sizes.append(path.stat().st_size)
                with self._lock:
                    if etag in self._inflight and sizes:
                        self._inflight[etag] = max(sizes)
            self._report()

    # -- resolve ----------------------------------------------------------------------------------

    def _known_commit(self) -> Manifest | None:
        """A complete manifest of the revision when it is a full commit (immutable) downloaded or
        adopted with the same patterns: no need to ask the Hub (adopted caches work offline)."""
        revision = self.source.revision
        if len(revision) != 40 or any(c not in "0123456789abcdef" for c in revision):
            return None
        found = self.layout.load_manifest(revision)
        same = found is not None and (found.allow_patterns, found.ignore_patterns) == (
            list(self.source.allow_patterns),
            list(self.source.ignore_patterns),
        )
        return found if found is not None and found.complete and same else None

    def resolve(self) -> Manifest:
        """The full commit of the revision and its files (patterns applied); writes the manifest."""
        self._report("Resolving", f"resolving {self.source.revision}", force=True)
        known = self._known_commit()
        if known is not None:
            self._commit = known.commit
            return known
        api = huggingface_hub.HfApi(endpoint=self.source.endpoint_url, token=self._token_arg)
        try:
            info = self._retry(
                lambda: api.repo_info(
                    self.source.repo,
                    revision=self.source.revision,
                    repo_type=self.source.repo_type,
                    files_metadata=True,
                )
            )
        except Exception as exc:
            raise self._fail(exc) from None
        sha = hubanswer.commit(info.sha)  # NB: the endpoint's words name paths: checked first
        siblings = list(
            filter_repo_objects(
                getattr(info, "siblings", None) or [],
                allow_patterns=list(self.source.allow_patterns) or None,
                ignore_patterns=list(self.source.ignore_patterns) or None,
                key=lambda s: s.rfilename,
            )
        )
        if not siblings:
            raise hferrors.DownloadError(
                hferrors.EXIT_ENTRY_NOT_FOUND,
                f"no file of {self.source.repo} at {self.source.revision} matches the allow/ignore patterns",
            )
        manifest = Manifest(
            repo=self.source.repo,
            repo_type=self.source.repo_type,
            revision=self.source.revision,
            commit=sha,
            files=hubanswer.entries(_entries(siblings)),
            endpoint=self.source.endpoint_url,
            allow_patterns=list(self.source.allow_patterns),
            ignore_patterns=list(self.source.ignore_patterns),
            verify=self.verify,
            created_at=now(),
        )
        previous = self.layout.load_manifest(sha)
        if (
            previous is not None
            and previous.complete
            and {f.path for f in previous.files} >= {f.path for f in manifest.files}
        ):
            manifest = replace(previous, revision=self.source.revision)
        else:
            self.layout.save_manifest(manifest)
        self._commit = sha
        return manifest

    # -- per file ---------------------------------------------------------------------------------

    def _check(self, entry: FileEntry, blob: Path) -> bool:
        if self.verify == "none":
            return blob.exists()
        if blob.stat().st_size != entry.size:
            return False
        return self.verify != "sha256" or hash_file(blob, entry)

    def _resume(self, commit: str, entry: FileEntry, orphan: Path) -> int:
        """Continue a partial blob left by a killed process; returns the bytes fetched."""
        have = orphan.stat().st_size
        if have > entry.size:
            orphan.unlink()
            return -1
        url = huggingface_hub.hf_hub_url(
            self.source.repo,
            entry.path,
            repo_type=self.source.repo_type,
            revision=commit,
            endpoint=self.source.endpoint_url,
        )
        headers = build_hf_headers(token=self._token_arg, library_name="sparkrun-operator")
        with open(orphan, "r+b") as f:
            f.seek(have)
            http_get(
                url,
                f,
                resume_size=have,
                headers=headers,
                expected_size=entry.size,
                displayed_filename=entry.path,
            )
        os.replace(orphan, self.layout.blob(entry.etag))
        return entry.size - have

    def _fetch(self, commit: str, entry: FileEntry) -> tuple[How, int]:
        """Get the blob onto disk (not yet verified): resume an orphan or download it."""
        self.layout.locks.mkdir(parents=True, exist_ok=True)
        with filelock.FileLock(str(self.layout.lock(entry.etag))):
            orphans = self.layout.incomplete(entry.etag)
            if orphans and not self.layout.blob(entry.etag).exists():
                orphans.sort(key=lambda p: p.stat().st_size)
                for extra in orphans[:-1]:
                    extra.unlink(missing_ok=True)
                fetched = self._resume(commit, entry, orphans[-1])
                if fetched >= 0:
                    return "resumed", fetched
        with contextlib.suppress(FileNotFoundError):
            self.layout.pointer(commit, entry.path).unlink()
        huggingface_hub.hf_hub_download(
            self.source.repo,
            entry.path,
            repo_type=self.source.repo_type,
            revision=commit,
            cache_dir=str(self.layout.hub),
            endpoint=self.source.endpoint_url,
            token=self._token_arg,
        )
        return "fetched", entry.size

    def _ensure(self, commit: str, group: list[FileEntry], verified: VerifiedBlobs) -> How:
        """Make one blob present and verified, and link every file of ``group`` (same etag) to it."""
        entry = group[0]
        blob = self.layout.blob(entry.etag)
        how: How
        if blob.exists() and verified.is_verified(blob, self.verify):
            how = "verified"
        elif blob.exists() and self._check(entry, blob):
            how = "present"
        else:
            blob.unlink(missing_ok=True)
            had = max((p.stat().st_size for p in self.layout.incomplete(entry.etag)), default=0)
            with self._lock:
                self._inflight[entry.etag] = had
                self._inflight_base[entry.etag] = had
            try:
                how = self._fetch_verified(commit, entry, blob)
            finally:
                with self._lock:
                    self._inflight.pop(entry.etag, None)
                    self._inflight_base.pop(entry.etag, None)
        if self.verify != "none":
            verified.record(blob, self.verify)
        for member in group:
            self.layout.link(commit, member)
        with self._lock:
            self._done_bytes += sum(m.size for m in group)
            self._done_files += len(group)
        return how

    def _fetch_verified(self, commit: str, entry: FileEntry, blob: Path) -> How:
        how, fetched = self._retry(lambda: self._fetch(commit, entry))
        with self._lock:  # NB: counted once: out of the in-flight bytes, into the fetched ones
            self._fetched += fetched
            self._inflight.pop(entry.etag, None)
            self._inflight_base.pop(entry.etag, None)
        if self._check(entry, blob):
            return how
        blob.unlink(missing_ok=True)  # a bad copy: once more from the start
        self._retry(lambda: self._fetch(commit, entry))
        with self._lock:
            self._fetched += entry.size
        if not self._check(entry, blob):
            blob.unlink(missing_ok=True)
            raise hferrors.DownloadError(
                hferrors.EXIT_INVALID,
                f"{entry.path} of {self.source.repo}@{commit} fails {self.verify} verification "
                "after a fresh download: the Hub serves bytes that do not match its metadata.",
            )
        return how

    # -- whole revision ---------------------------------------------------------------------------

    def _ensure_all(self, commit: str, files: list[FileEntry]) -> dict[str, int]:
        verified = VerifiedBlobs(self.layout)
        counts: dict[str, int] = {}
        stop = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(stop,), name="download-progress", daemon=True)
        watcher.start()
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="download")
        try:
            groups: dict[str, list[FileEntry]] = {}
            for entry in files:
                groups.setdefault(entry.etag, []).append(entry)
            futures = [pool.submit(self._ensure, commit, g, verified) for g in groups.values()]
            wait(futures, return_when=FIRST_EXCEPTION)
            for future in futures:
                if future.done() and future.exception() is not None:
                    pool.shutdown(wait=True, cancel_futures=True)
                    exc = future.exception()
                    assert exc is not None
                    raise self._fail(exc, commit) from None
            for group, future in zip(groups.values(), futures, strict=True):
                how = future.result()
                counts[how] = counts.get(how, 0) + len(group)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            stop.set()
            watcher.join()
        return counts

    def download(self, manifest: Manifest | None = None, only: Sequence[str] | None = None) -> Result:
        """Resolve (unless given a manifest) and make every file present and verified."""
        started = time.monotonic()
        try:
            manifest = hubanswer.manifest(manifest or self.resolve())
            self._commit = commit = manifest.commit
            files = [f for f in manifest.files if only is None or f.path in set(only)]
            self._total = (len(files), sum(f.size for f in files))
            self._report("Downloading", f"{len(files)} files of {commit}", force=True)
            counts = self._ensure_all(commit, files)
            self._report("Verifying", force=True)
            bad = [
                f.path
                for f in files
                if check_file(self.layout, commit, f, "size" if self.verify != "none" else "none") != "ok"
            ]
            if bad:
                raise hferrors.DownloadError(
                    hferrors.EXIT_INVALID, f"files not in place after download: {bad[:10]}"
                )
            if LEVELS[self.verify] > LEVELS.get(manifest.verify, 0) or not manifest.complete:
                manifest.verify = self.verify
            manifest.complete, manifest.verified_at = True, now()
            path = self.layout.save_manifest(manifest)
            self.layout.write_ref(manifest.revision, commit)
        except hferrors.DownloadError as err:
            self._report("Failed", err.message, force=True)
            raise
        except Exception as exc:
            failure = self._fail(exc)
            self._report("Failed", failure.message, force=True)
            raise failure from None
        self._report("Ready", f"{commit} ready", force=True)
        return Result(
            repo=self.source.repo,
            revision=manifest.revision,
            commit=commit,
            files=len(files),
            total_bytes=sum(f.size for f in files),
            fetched_bytes=self._fetched,
            verify=self.verify,
            manifest=str(path),
            snapshot=str(self.layout.snapshot(commit)),
            seconds=round(time.monotonic() - started, 3),
            how=counts,
            repaired=list(only or []),
        )

    # -- inspect and repair -----------------------------------------------------------------------

    def find_commit(self, commit: str | None) -> str:
        found = commit or self.layout.read_ref(self.source.revision)
        if found is None or self.layout.load_manifest(found) is None:
            raise hferrors.DownloadError(
                hferrors.EXIT_NOT_CACHED,
                f"no manifest for {self.source.repo}@{commit or self.source.revision} under {self.root}: "
                "download it first (or adopt the existing cache).",
            )
        return found

    def inspect(
        self, commit: str | None = None, level: VerifyLevel = "sha256", selection: Selection = "all"
    ) -> InspectReport:
        """Check every (selected) file of the manifest (no network): missing, invalid, unreadable."""
        sha = self.find_commit(commit)
        manifest = self.layout.load_manifest(sha)
        assert manifest is not None
        hubanswer.manifest(manifest)
        kept = set(select_files([f.path for f in manifest.files], selection))
        chosen = [f for f in manifest.files if f.path in kept]
        states: dict[str, list[str]] = {"missing": [], "invalid": [], "unreadable": [], "ok": []}
        with ThreadPoolExecutor(self.workers, thread_name_prefix="inspect") as pool:
            results = pool.map(lambda f: (f.path, check_file(self.layout, sha, f, level)), chosen)
            for path, state in results:
                states[state].append(path)
        return InspectReport(
            repo=self.source.repo,
            commit=sha,
            verify=level,
            files=len(chosen),
            total_bytes=sum(f.size for f in chosen),
            missing=sorted(states["missing"]),
            invalid=sorted(states["invalid"]),
            unreadable=sorted(states["unreadable"]),
            manifest=str(self.layout.manifest_path(sha)),
        )

    def repair(
        self, commit: str | None = None, level: VerifyLevel = "sha256", selection: Selection = "all"
    ) -> Result:
        """Re-fetch only the files ``inspect`` finds missing or invalid."""
        report = self.inspect(commit, level, selection)
        manifest = self.layout.load_manifest(report.commit)
        assert manifest is not None
        bad = set(report.missing) | set(report.invalid) | set(report.unreadable)
        verified = VerifiedBlobs(self.layout)
        for entry in manifest.files:
            if entry.path in bad:
                with contextlib.suppress(FileNotFoundError):
                    self.layout.pointer(report.commit, entry.path).unlink()
                if entry.path not in report.missing or not self.layout.blob(entry.etag).exists():
                    self.layout.blob(entry.etag).unlink(missing_ok=True)
                verified.forget(entry.etag)
        self.verify = level
        return self.download(manifest, only=sorted(bad))


# -- command line ---------------------------------------------------------------------------------


def read_token(token_file: str | None) -> str | None:
    """The token from ``--token-file`` (a mounted Secret key), else ``HF_TOKEN``; None if neither."""
    if token_file:
        try:
            return Path(token_file).read_text().strip() or None
        except OSError as err:
            raise hferrors.DownloadError(
                hferrors.EXIT_USAGE, f"cannot read the token file: {err.strerror}"
            ) from None
    return os.environ.get("HF_TOKEN") or None


def run(argv: Sequence[str] | None = None) -> int:
    """The CLI: JSON lines (progress, then ``result``/``inspect``/``error``); returns the exit code."""
    import json
    import sys

    from sparkrun_operator.runtime.progress import JsonLinesSink, Sink, StatusFileSink

    try:
        args = parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0) and hferrors.EXIT_USAGE
    disable_progress_bars()
    token: str | None = None
    notice: str | None = None  # the token withheld from this endpoint (ADR 0040)
    try:
        token = read_token(args.token_file)
        sinks: list[Sink] = [] if args.quiet else [JsonLinesSink()]
        if args.status_file:
            sinks.append(StatusFileSink(Path(args.status_file)))
        reporter = Reporter(sinks, interval=args.progress_interval)
        endpoint = args.endpoint
        if endpoint is None and args.command == "repair":
            layout = CacheLayout(Path(args.root), args.repo, args.repo_type)
            commit = args.commit or layout.read_ref(args.revision)
            found = layout.load_manifest(commit) if commit else None
            endpoint = found.endpoint if found is not None else None
        source = Source(
            args.repo, args.revision, endpoint, args.repo_type, tuple(args.allow), tuple(args.ignore)
        )
        sent, notice = allowed_token(token, source.endpoint_url, args.token_origins)
        downloader = Downloader(
            Path(args.root), source, token=sent, verify=args.verify, workers=args.workers, reporter=reporter
        )
        if args.command == "download":
            result = downloader.download()
            listed = downloader.layout.load_manifest(result.commit)
            files = [(f.path, f.size) for f in listed.files] if listed is not None else []
            body = result.to_json() | modelshape.shape_of(Path(result.snapshot), files)
        elif args.command == "resolve":
            manifest = downloader.resolve()
            kept = set(select_files([f.path for f in manifest.files], args.selection))
            manifest.files = [f for f in manifest.files if f.path in kept]
            body = {"event": "manifest", "manifest": manifest.to_daemon(args.selection)}
        elif args.command == "repair":
            result = downloader.repair(args.commit, args.verify, args.selection)
            body = result.to_json() | daemon_manifest(downloader.layout, result.commit, args)
        else:
            report = downloader.inspect(args.commit, args.verify, args.selection)
            print(
                json.dumps(report.to_json() | daemon_manifest(downloader.layout, report.commit, args)),
                flush=True,
            )
            return hferrors.EXIT_OK if report.clean else hferrors.EXIT_INVALID
        print(json.dumps(body), flush=True)
        return hferrors.EXIT_OK
    except hferrors.DownloadError as err:
        message = err.message.replace(token, "***") if token else err.message
        message = clip(f"{message} ({notice})" if notice else message, MESSAGE_MAX)
        error = {"event": "error", "reason": err.reason, "exit_code": err.code, "retryable": err.retryable}
        print(json.dumps({**error, "message": message}), flush=True)
        # NB: escaped: the endpoint's words must not start a line of the log (a forged report)
        print(f"error: {json.dumps(message)}", file=sys.stderr)
        return err.code


def main() -> None:
    raise SystemExit(run())


if __name__ == "__main__":
    main()
