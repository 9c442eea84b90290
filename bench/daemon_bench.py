"""bench/daemon_bench.py — the helper of bench/daemon.sh, for every mode:

    daemon_bench.py MODE COMMAND ARGS...     (MODE: local, s3, pubsub, azqueue)

It seeds the source, applies the time-to-equal runs' changes and waits for DST_slate to
match, checks the destinations against the source, writes and times the latency runs'
objects, and (cloud modes) makes and removes buckets, queues and subscriptions. The parts
every mode shares (the change plan, the scheduled latency writer, the latency summary, the
seeding) are written once; a store class per source (a local folder, S3 through boto3, GCS
through fake-gcs-server's JSON API, Azure Blob + its storage queue through their REST APIs)
does the reads and writes. local needs the standard library only (daemon.sh runs it with
python3); s3 needs boto3, azqueue's `sas` azure-storage-blob (daemon.sh runs those with the
python of scripts/services.sh's venv). Figures go to stdout, one line, for daemon.sh to
read; progress and problems to stderr.
"""
import base64
import concurrent.futures as cf
import datetime
import email.utils
import hashlib
import hmac
import http.client
import json
import multiprocessing as mp
import os
import queue as queue_mod
import random
import re
import sys
import threading
import time
import urllib.parse
import uuid
import xml.etree.ElementTree as ET

KIB = 1024
MODE = ""            # set by main(): local | s3 | pubsub | azqueue
PREFIX = "data/"     # the cloud modes' objects live under data/ (local: the folder itself)
# Azurite's account and key, published in Azure's documentation (as slate and the tests use)
AZ_ACCOUNT = "devstoreaccount1"
AZ_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
AZ_VERSION = "2021-12-02"


def die(msg):
    print("python: " + msg, file=sys.stderr, flush=True)
    sys.exit(2)


def pct(vals, q):   # nearest rank: the ceil(q * n)-th smallest of sorted vals
    return vals[max(0, -(-round(q * 1000) * len(vals) // 1000) - 1)]


def md5b64(data):
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def read_or_none(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def write_file(path, data, excl=False):
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if excl else os.O_TRUNC)
    fd = os.open(path, flags, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def env_threads(name):
    return int(os.environ.get(name, "16"))


# =======================================================================================
# Stores: the source of each mode. Keys are relative to the store's root (cloud modes:
# "data/dNNN/f-NNNNNN", local: "dNNN/f-NNNNNN"). Each store has
#   prefix, threads (writes at once), seed_progress (log every so many seeded objects),
#   put(key, data, new=False, event=True), delete(key), listing() -> {key: (size, digest)},
#   fresh(size) -> random content.
# =======================================================================================

class Store:
    prefix = PREFIX
    threads = 1
    seed_progress = 0

    def fresh(self, size):
        return os.urandom(size)


class LocalStore(Store):
    """A local folder (local mode: SRC itself)."""
    prefix = ""

    def __init__(self, root):
        self.root = self.name = root

    def put(self, key, data, new=False, event=True):
        path = os.path.join(self.root, key)
        try:
            write_file(path, data, excl=new)
        except FileNotFoundError:      # seeding: the folder's first file
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_file(path, data, excl=new)

    def delete(self, key):
        os.unlink(os.path.join(self.root, key))

    def listing(self):
        """{dNNN/name: (size, None)} of the seeded folders' files."""
        out = {}
        for d in os.listdir(self.root):
            if not re.match(r"^d[0-9]+$", d):
                continue
            for f in os.listdir(os.path.join(self.root, d)):
                if not f.startswith("."):
                    out[d + "/" + f] = (os.stat(os.path.join(self.root, d, f)).st_size, None)
        return out


def s3_client(kind, pool=None):
    """A fresh boto3 client on moto (create them after fork: a client holds a connection pool)."""
    import boto3
    from botocore.config import Config
    conf = Config(max_pool_connections=pool or max(env_threads("BENCH_S3_THREADS"), 10) + 4,
                  retries={"max_attempts": 10, "mode": "standard"},
                  s3={"addressing_style": "path"}, connect_timeout=10, read_timeout=60)
    return boto3.client(kind, endpoint_url=os.environ["BENCH_S3_ENDPOINT"], region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing", config=conf)


class S3(Store):
    """A bucket on moto, through boto3."""
    seed_progress = 5000

    def __init__(self, bucket, client=None):
        self.bucket = self.name = bucket
        self.s3 = client or s3_client("s3")
        self.threads = env_threads("BENCH_S3_THREADS")

    def put(self, key, data, new=False, event=True):
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)

    def delete(self, key):
        self.s3.delete_object(Bucket=self.bucket, Key=key)

    def listing(self, prefix=PREFIX):
        """{key: (size, etag)} of every object under prefix."""
        out = {}
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for o in page.get("Contents", []):
                out[o["Key"]] = (o["Size"], o.get("ETag"))
        return out

    def head(self, key):
        """(size, etag) or None if the key is absent."""
        import botocore.exceptions
        try:
            r = self.s3.head_object(Bucket=self.bucket, Key=key)
        except botocore.exceptions.ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        return (r["ContentLength"], r["ETag"])


class Http:
    """Keep-alive HTTP/1.1 to one emulator, one connection per thread; retries connection
    errors, 429 and 5xx (every request made here is idempotent, or harmless when repeated:
    a repeated queue message is a repeated event)."""

    def __init__(self, base, sign=None):
        u = urllib.parse.urlsplit(base)
        self.host, self.port, self.root = u.hostname, u.port or 80, u.path.rstrip("/")
        self.sign = sign
        self.local = threading.local()

    def request(self, method, path, query=(), body=b"", headers=None, allow=(), encoded=False):
        """path: under the base URL's path; encoded=True: already percent-encoded (a GCS object
        name is one path segment, its '/' encoded)."""
        path = self.root + (path if encoded else urllib.parse.quote(path))
        url = path + ("?" + urllib.parse.urlencode(list(query)) if query else "")
        err = None
        for attempt in range(6):
            h = dict(headers or {})
            h["Content-Length"] = str(len(body))
            if self.sign:
                self.sign(method, path, query, h, len(body))
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
            try:
                conn.request(method, url, body=body, headers=h)
                r = conn.getresponse()
                data = r.read()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                self.local.conn = None
                err = "%s %s: %s" % (method, path, e)
                time.sleep(0.1 * (attempt + 1))
                continue
            if 200 <= r.status < 300 or r.status in allow:
                return r.status, data, r
            err = "%s %s: HTTP %d %s" % (method, path, r.status, data[:300])
            if r.status == 429 or r.status >= 500:
                time.sleep(0.1 * (attempt + 1))
                continue
            break
        raise RuntimeError(err)


def az_sign(method, path, query, h, body_len):
    """Shared Key (Blob and Queue services, version 2009-09-19 and later) with Azurite's key."""
    h["x-ms-date"] = email.utils.formatdate(usegmt=True)
    h["x-ms-version"] = AZ_VERSION
    low = {k.lower(): v for k, v in h.items()}
    std = [low.get("content-encoding", ""), low.get("content-language", ""), str(body_len) if body_len else "",
           low.get("content-md5", ""), low.get("content-type", ""), "", "", "", "", "", ""]
    xms = "".join("%s:%s\n" % (k, low[k]) for k in sorted(low) if k.startswith("x-ms-"))
    res = "/" + AZ_ACCOUNT + path + "".join("\n%s:%s" % (k.lower(), v) for k, v in sorted(query))
    to_sign = method + "\n" + "\n".join(std) + "\n" + xms + res
    sig = base64.b64encode(hmac.new(base64.b64decode(AZ_KEY), to_sign.encode(), hashlib.sha256).digest())
    h["Authorization"] = "SharedKey %s:%s" % (AZ_ACCOUNT, sig.decode())


class Gcs(Store):
    """A bucket on fake-gcs-server, through its JSON API (writes: the JSON upload API; each
    write publishes OBJECT_FINALIZE, each delete OBJECT_DELETE to the topic gcs-events)."""
    seed_progress = 1000

    def __init__(self, bucket, queue=None):
        self.bucket = self.name = bucket
        self.http = Http(os.environ["BENCH_GCS_ENDPOINT"])
        self.threads = env_threads("BENCH_CLOUD_THREADS")

    def _o(self, key):
        return "/storage/v1/b/%s/o/%s" % (self.bucket, urllib.parse.quote(key, safe=""))

    def fresh(self, size):
        """Random content, never one whose MD5 in base64 starts with "W/" (1 in 4,096): the GCS
        write shim the daemon reads through takes such an unquoted ETag for a weak one, strips
        the "W/" and answers the daemon's If-Match with 412 (the copy fails, "source object
        changed during the copy"); fixed in scripts/gcs_xml_shim.py, but the running shim may
        predate it."""
        while True:
            data = os.urandom(size)
            if not md5b64(data).startswith("W/"):
                return data

    def create(self):
        self.http.request("POST", "/storage/v1/b", [("project", "test-project")],
                          json.dumps({"name": self.bucket}).encode(), {"Content-Type": "application/json"})

    def put(self, key, data, new=False, event=True):
        self.http.request("POST", "/upload/storage/v1/b/%s/o" % self.bucket,
                          [("uploadType", "media"), ("name", key)], data,
                          {"Content-Type": "application/octet-stream"})

    def delete(self, key):
        self.http.request("DELETE", self._o(key), allow=(404,), encoded=True)

    def listing(self, prefix=PREFIX):
        """{key: (size, md5 base64)} of every object under prefix."""
        out, token = {}, None
        while True:
            q = [("prefix", prefix), ("maxResults", "1000")] + ([("pageToken", token)] if token else [])
            _, data, _ = self.http.request("GET", "/storage/v1/b/%s/o" % self.bucket, q)
            page = json.loads(data)
            for o in page.get("items", []):
                out[o["name"]] = (int(o["size"]), o.get("md5Hash"))
            token = page.get("nextPageToken")
            if not token:
                return out

    def get(self, key):
        st, data, _ = self.http.request("GET", self._o(key), [("alt", "media")], allow=(404,), encoded=True)
        return None if st == 404 else data

    def drop(self):
        keys = list(self.listing(""))
        with cf.ThreadPoolExecutor(self.threads) as ex:
            list(ex.map(self.delete, keys))
        self.http.request("DELETE", "/storage/v1/b/" + self.bucket, allow=(404,))
        return len(keys)

    def backlog(self):
        return -1     # the Pub/Sub emulator does not tell a subscription's backlog


_seq_lock = threading.Lock()
_seq_last = [0]


def sequencer():
    """Increasing across the benchmark's processes (wall-clock nanoseconds), as Azure's
    per-blob sequencers increase: 32 hex digits, like Event Grid's."""
    with _seq_lock:
        _seq_last[0] = max(_seq_last[0] + 1, time.time_ns())
        return "%032X" % _seq_last[0]


class Az(Store):
    """A container on Azurite plus the storage queue the daemon follows. Azurite emits no
    blob events (no Event Grid emulator exists): every write or delete is followed by the
    event Event Grid would deliver to the queue (Event Grid schema, one event a message,
    base64 JSON), built as tests/daemon_e2e.rs's blob_event does."""
    seed_progress = 1000

    def __init__(self, container, queue=None):
        self.container, self.queue, self.name = container, queue, container
        self.blob_base = os.environ["BENCH_AZ_BLOB"].rstrip("/")   # …/devstoreaccount1
        self.blob = Http(self.blob_base, az_sign)
        self.q = Http(os.environ["BENCH_AZ_QUEUE"], az_sign)
        self.threads = env_threads("BENCH_CLOUD_THREADS")

    def create(self):
        self.blob.request("PUT", "/" + self.container, [("restype", "container")])
        self.q.request("PUT", "/" + self.queue)

    def event(self, key, kind, size):
        topic = ("/subscriptions/0/resourceGroups/rg/providers/Microsoft.Storage/storageAccounts/"
                 + AZ_ACCOUNT)
        ev = {"topic": topic,
              "subject": "/blobServices/default/containers/%s/blobs/%s" % (self.container, key),
              "eventType": "Microsoft.Storage." + kind, "id": str(uuid.uuid4()),
              "eventTime": datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z"),
              "data": {"api": "PutBlob" if kind == "BlobCreated" else "DeleteBlob", "contentLength": size,
                       "blobType": "BlockBlob", "url": "%s/%s/%s" % (self.blob_base, self.container, key),
                       "sequencer": sequencer()},
              "dataVersion": "", "metadataVersion": "1"}
        text = base64.b64encode(json.dumps(ev).encode()).decode()
        self.q.request("POST", "/%s/messages" % self.queue,
                       body=("<QueueMessage><MessageText>%s</MessageText></QueueMessage>" % text).encode())

    def put(self, key, data, new=False, event=True):
        self.blob.request("PUT", "/%s/%s" % (self.container, key), body=data,
                          headers={"x-ms-blob-type": "BlockBlob", "Content-Type": "application/octet-stream"})
        if event:
            self.event(key, "BlobCreated", len(data))

    def delete(self, key, event=True):
        self.blob.request("DELETE", "/%s/%s" % (self.container, key), allow=(404,))
        if event:
            self.event(key, "BlobDeleted", 0)

    def listing(self, prefix=PREFIX):
        out, marker = {}, None
        while True:
            q = [("restype", "container"), ("comp", "list"), ("prefix", prefix), ("maxresults", "5000")]
            if marker:
                q.append(("marker", marker))
            _, data, _ = self.blob.request("GET", "/" + self.container, q)
            root = ET.fromstring(data)
            for b in root.iter("Blob"):
                p = b.find("Properties")
                out[b.findtext("Name")] = (int(p.findtext("Content-Length")), p.findtext("Content-MD5") or None)
            marker = root.findtext("NextMarker")
            if not marker:
                return out

    def get(self, key):
        st, data, _ = self.blob.request("GET", "/%s/%s" % (self.container, key), allow=(404,))
        return None if st == 404 else data

    def drop(self):
        n = len(self.listing(""))
        self.q.request("DELETE", "/" + self.queue, allow=(404,))
        self.blob.request("DELETE", "/" + self.container, [("restype", "container")], allow=(404,))
        return n

    def backlog(self):
        """Messages in the daemon's queue (Azurite's approximate count: visible + invisible)."""
        _, _, r = self.q.request("GET", "/" + self.queue, [("comp", "metadata")])
        return int(r.getheader("x-ms-approximate-messages-count", "-1"))


def cloud_store(name, queue=None):
    """pubsub / azqueue: the source bucket or container."""
    return (Gcs if MODE == "pubsub" else Az)(name, queue)


# =======================================================================================
# Shared parts: seeding, the change plan, applying it, waiting for a local folder, the
# scheduled latency writer and the latency summary
# =======================================================================================

def seed(store, n, per_folder):
    """n random 1 KiB objects dNNN/f-NNNNNN (per_folder a folder; under the store's prefix),
    store.threads at a time (azqueue: no events for these), then checked by listing.
    Returns the seconds the writes took."""
    fdig = max(3, len(str((n - 1) // per_folder)))
    ndig = max(6, len(str(n - 1)))
    keys = ["%sd%0*d/f-%0*d" % (store.prefix, fdig, i // per_folder, ndig, i) for i in range(n)]
    blobs = [store.fresh(KIB) for _ in range(n)]
    t0 = time.monotonic()
    done = [0]
    lock = threading.Lock()

    def put(i):
        store.put(keys[i], blobs[i], new=True, event=False)
        with lock:
            done[0] += 1
            if store.seed_progress and done[0] % store.seed_progress == 0:
                print("python:   seeded %d of %d (%.0f/s)" % (done[0], n, done[0] / (time.monotonic() - t0)),
                      file=sys.stderr, flush=True)

    if store.threads == 1:
        for i in range(n):
            put(i)
    else:
        with cf.ThreadPoolExecutor(store.threads) as ex:
            for f in cf.as_completed([ex.submit(put, i) for i in range(n)]):
                f.result()
    secs = time.monotonic() - t0
    got = store.listing()
    if len(got) != n or any(v[0] != KIB for v in got.values()):
        die("seeding: %s holds %d objects under '%s', want %d of %d bytes"
            % (store.name, len(got), store.prefix, n, KIB))
    return secs


def plan_changes(store, run, n_changes):
    """n_changes to the store's seeded objects: 50% overwrites with a new size, 30% new, 20%
    deletes, spread over the folders, in a random order (seeded by run). Returns ops, a list
    of (op, key) with op over / new / del, and expect, {key: new content, or None for deleted}
    (the content is made here, before the clock starts)."""
    n_over, n_new = n_changes // 2, n_changes * 3 // 10
    n_del = n_changes - n_over - n_new
    rng = random.Random(7919 * run + 17)
    folder_re = re.compile("^%s(d[0-9]+)/([^/]+)$" % re.escape(store.prefix))
    files, sizes = {}, {}
    for k, (size, _) in store.listing().items():
        m = folder_re.match(k)
        if m:
            files.setdefault(m.group(1), []).append(k)
            sizes[k] = size
    folders = sorted(files)
    if not folders:
        die("no seeded folder in " + store.name)
    rng.shuffle(folders)
    for d in folders:
        files[d].sort()
        rng.shuffle(files[d])
    picked = []          # existing objects: overwrites, then deletes; one folder after the other
    k = 0
    while len(picked) < n_over + n_del:
        d = folders[k % len(folders)]
        k += 1
        if files[d]:
            picked.append(files[d].pop())
        elif k > 10 * (n_over + n_del) + len(folders):
            die("not enough objects to change in " + store.name)
    new = ["%s%s/new-r%03d-%03d" % (store.prefix, folders[(n_over + n_del + j) % len(folders)], run, j)
           for j in range(n_new)]
    ops = [("over", p) for p in picked[:n_over]] + [("del", p) for p in picked[n_over:]] + [("new", p) for p in new]
    rng.shuffle(ops)
    expect = {}
    for op, p in ops:
        if op == "del":
            expect[p] = None
            continue
        cur = sizes[p] if op == "over" else -1
        size = cur
        while size == cur:
            size = rng.randint(KIB + 1, 2 * KIB - 1)
        expect[p] = store.fresh(size)
    return ops, expect


def apply_changes(store, ops, expect):
    """Make the planned changes, store.threads at once (azqueue: each followed by its event).
    Returns (start, the moment the last one was complete), monotonic."""
    def apply(op_p):
        op, p = op_p
        if op == "del":
            store.delete(p)
        else:
            store.put(p, expect[p], new=(op == "new"))
        return time.monotonic()

    t_first = time.monotonic()
    if store.threads == 1:
        done = [apply(o) for o in ops]
    else:
        with cf.ThreadPoolExecutor(store.threads) as ex:
            done = list(ex.map(apply, ops))
    return t_first, max(done)


def local_path(dst, store, key):
    """Where the store's key lands in the local folder dst."""
    return os.path.join(dst, key[len(store.prefix):])


def wait_local(store, dst, expect, t_last, timeout, what):
    """Read the changed keys in the local folder dst every ~2 ms until each holds its new bytes
    (or is gone), then confirm all of them at once. Returns (the moment dst matched, passes);
    exits 3 if it does not match `timeout` s after t_last."""
    pending = dict(expect)
    passes = 0
    deadline = t_last + timeout
    while True:
        passes += 1
        for p in list(pending):
            if read_or_none(local_path(dst, store, p)) == pending[p]:
                del pending[p]
        now = time.monotonic()
        if not pending:
            # all seen equal: confirm they all still are (nothing regressed meanwhile)
            bad = [p for p, e in expect.items() if read_or_none(local_path(dst, store, p)) != e]
            if not bad:
                return now, passes
            for p in bad:
                pending[p] = expect[p]
        if now > deadline:
            print("python: %d of %d changed %s still differ in %s %d s after the last change, e.g. %s"
                  % (len(pending), len(expect), what, dst, timeout, ", ".join(sorted(pending)[:5])), file=sys.stderr)
            sys.exit(3)
        time.sleep(0.002)


def write_list(list_out, keys):
    with open(list_out, "w") as f:
        f.write("".join(p + "\n" for p in sorted(keys)))


def read_list(list_in):
    with open(list_in) as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def start_writers(keys, rate, nthreads, t0, write, written, after=None):
    """The latency writer: nthreads threads write objects 0 … len(keys)-1 (write(i)), object i due
    at t0 + i/rate, recording each write's completion in written[i] (monotonic), then calling
    after(i). Returns (threads, behind: per thread the most s behind schedule, errors)."""
    total = len(keys)
    behind = [0.0] * nthreads
    errors = []

    def writer(k):
        for i in range(k, total, nthreads):
            target = t0 + i / rate
            now = time.monotonic()
            if now < target:
                time.sleep(target - now)
            else:
                behind[k] = max(behind[k], now - target)
            try:
                write(i)
            except Exception as e:   # noqa: BLE001 (reported by the caller)
                errors.append("%s: %s" % (keys[i], e))
                return
            written[i] = time.monotonic()
            if after:
                after(i)

    ts = [threading.Thread(target=writer, args=(k,), daemon=True) for k in range(nthreads)]
    for t in ts:
        t.start()
    return ts, behind, errors


def check_writes(errors, rate, poller):
    """Die (the poller stopped) if a latency write failed."""
    if errors:
        poller.terminate()
        die("%d writes failed at %d/s, e.g. %s" % (len(errors), rate, errors[0]))


def join_poller(poller, grace):
    """Wait for the latency poller: it ends when all arrived, or grace s after the writer."""
    poller.join(grace + 60)
    if poller.is_alive():
        poller.terminate()
        die("the latency poller did not finish")


def latency_summary(keys, written, arrived, writer_done, rate, behind):
    """The figures every mode prints: total missing p50 p99 max mean (ms) achieved_rate
    behind_ms arrived_while_writing."""
    total = len(keys)
    lat = sorted((arrived[i] - written[i]) * 1000 for i in range(total) if arrived[i] > 0)
    missing = total - len(lat)
    if missing:
        miss = [keys[i] for i in range(total) if not arrived[i]]
        print("python: %d of %d objects written at %d/s never arrived, e.g. %s"
              % (missing, total, rate, ", ".join(miss[:5])), file=sys.stderr)
    if not lat:
        lat = [float("nan")]
    ws = sorted(written[:total])
    span = ws[-1] - ws[0]
    achieved = (total - 1) / span if span > 0 else float("inf")
    during = sum(1 for i in range(total) if 0 < arrived[i] <= writer_done)
    return "%d %d %.1f %.1f %.1f %.1f %.1f %.1f %d" % (
        total, missing, pct(lat, 0.50), pct(lat, 0.99), lat[-1], sum(lat) / len(lat), achieved,
        max(behind) * 1000, during)


def lat_keys(store, rate, total, n_folders):
    return ["%slat-%d/d%03d/f-%06d" % (store.prefix, rate, i % n_folders, i) for i in range(total)]


# =======================================================================================
# local mode: SRC and DST are local folders
# =======================================================================================

def local_seed(root, n, per_folder):
    secs = seed(LocalStore(root), n, per_folder)
    print("%d %.1f" % (n, secs))


def local_changes(src, dst, run, n_changes, timeout, list_out):
    """Apply n_changes to src, then poll dst until it mirrors src on every changed path.
    Prints: ms_to_equal passes apply_ms. Writes the changed paths (relative) to list_out."""
    store = LocalStore(src)
    ops, expect = plan_changes(store, run, n_changes)
    t_first, t_last = apply_changes(store, ops, expect)
    t_eq, passes = wait_local(store, dst, expect, t_last, timeout, "paths")
    write_list(list_out, expect)
    print("%.3f %d %.3f" % ((t_eq - t_last) * 1000, passes, (t_last - t_first) * 1000))


def local_verify(src, dst, list_in):
    """Every path of list_in is the same in dst as in src (bytes, or absent in both)."""
    bad = [p for p in read_list(list_in)
           if read_or_none(os.path.join(src, p)) != read_or_none(os.path.join(dst, p))]
    if bad:
        die("%d changed paths differ between %s and %s, e.g. %s" % (len(bad), src, dst, ", ".join(bad[:5])))
    print("ok")


def _local_poll(dst_root, sub, n_folders, total, nwritten, writer_done, arrived, grace):
    """Poller process: watch for each written file in dst, only the not-yet-arrived ones
    (each folder listed every ~1 ms)."""
    pending = [dict() for _ in range(n_folders)]     # folder -> {name: index}
    seen = 0
    dirs = [os.path.join(dst_root, sub, "d%03d" % j) for j in range(n_folders)]
    while True:
        n = nwritten.value
        while seen < n:
            pending[seen % n_folders]["f-%06d" % seen] = seen
            seen += 1
        for j in range(n_folders):
            if not pending[j]:
                continue
            try:
                names = set(os.listdir(dirs[j]))
            except FileNotFoundError:
                continue
            now = time.monotonic()
            for name in [nm for nm in pending[j] if nm in names]:
                try:
                    if os.stat(os.path.join(dirs[j], name)).st_size != KIB:
                        continue           # not complete yet
                except FileNotFoundError:
                    continue
                arrived[pending[j].pop(name)] = now
        done_at = writer_done.value
        left = sum(len(p) for p in pending)
        if done_at > 0 and seen == total and left == 0:
            return
        if done_at > 0 and time.monotonic() > done_at + grace:
            return
        time.sleep(0.001)


def local_latency(src, dst, rate, seconds, n_folders, grace):
    """Write rate*seconds new 1 KiB files (lat-R/dXXX/f-NNNNNN) at `rate` per second and time
    their arrival in dst. Prints the latency summary."""
    store = LocalStore(src)
    total = rate * seconds
    sub = "lat-%d" % rate
    keys = lat_keys(store, rate, total, n_folders)
    for j in range(n_folders):
        os.makedirs(os.path.join(src, sub, "d%03d" % j))
    time.sleep(1.0)   # let the watcher add its watches on the new folders
    ctx = mp.get_context("fork")
    written = ctx.Array("d", total, lock=False)
    arrived = ctx.Array("d", total, lock=False)
    nwritten = ctx.Value("q", 0, lock=False)
    writer_done = ctx.Value("d", 0.0, lock=False)
    poller = ctx.Process(target=_local_poll, args=(dst, sub, n_folders, total, nwritten,
                                                   writer_done, arrived, grace), daemon=True)
    poller.start()
    blob = os.urandom(total * KIB)

    def after(i):
        nwritten.value = i + 1

    ts, behind, errors = start_writers(
        keys, rate, 1, time.monotonic() + 0.1,
        lambda i: store.put(keys[i], blob[i * KIB:(i + 1) * KIB], new=True), written, after)
    for t in ts:
        t.join()
    writer_done.value = time.monotonic()
    check_writes(errors, rate, poller)
    join_poller(poller, grace)
    print(latency_summary(keys, written, arrived, writer_done.value, rate, behind))


# =======================================================================================
# s3 mode: moto S3 → moto S3, SRC's notifications through SQS; arrivals in DST_slate seen
# through DST_slate's own notifications (the witness queue)
# =======================================================================================

def queue_url(sqs, name):
    return sqs.get_queue_url(QueueName=name)["QueueUrl"]


def notify(s3, sqs, bucket, qname):
    """bucket's ObjectCreated / ObjectRemoved notifications → queue qname (S3 sends a TestEvent)."""
    arn = sqs.get_queue_attributes(QueueUrl=queue_url(sqs, qname),
                                   AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={
        "QueueConfigurations": [{"Id": "slate-bench", "QueueArn": arn,
                                 "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]}]})


def s3_setup(src, dst, dstr, q_slate, q_witness, n, per_folder):
    """Fresh buckets and queues; n random 1 KiB objects in src; then src's notifications →
    q_slate (after seeding: the daemon must not start with n events). Prints: n seconds."""
    store = S3(src)
    sqs = s3_client("sqs")
    for b in (src, dst, dstr):
        store.s3.create_bucket(Bucket=b)
    for q in (q_slate, q_witness):
        sqs.create_queue(QueueName=q)
    secs = seed(store, n, per_folder)
    notify(store.s3, sqs, src, q_slate)
    print("%d %.1f" % (n, secs))


def s3_witness_on(dst, q_witness):
    """dst's own notifications → q_witness: how the benchmark sees arrivals without polling."""
    notify(s3_client("s3"), s3_client("sqs"), dst, q_witness)
    print("ok")


def s3_teardown(src, dst, dstr, q_slate, q_witness):
    import botocore.exceptions
    s3, sqs = s3_client("s3"), s3_client("sqs")
    for b in (src, dst, dstr):    # notifications off first: deleting must not fill the queues
        try:
            s3.put_bucket_notification_configuration(Bucket=b, NotificationConfiguration={})
        except botocore.exceptions.ClientError:
            pass
    for q in (q_slate, q_witness):
        try:
            sqs.delete_queue(QueueUrl=queue_url(sqs, q))
        except botocore.exceptions.ClientError:
            pass
    for b in (src, dst, dstr):
        try:
            keys = list(S3(b, s3).listing(""))
        except botocore.exceptions.ClientError:
            continue
        chunks = [keys[i:i + 1000] for i in range(0, len(keys), 1000)]
        with cf.ThreadPoolExecutor(4) as ex:
            list(ex.map(lambda c: s3.delete_objects(Bucket=b, Delete={
                "Objects": [{"Key": k} for k in c], "Quiet": True}), chunks))
        s3.delete_bucket(Bucket=b)
    print("python: removed buckets %s %s %s and queues %s %s" % (src, dst, dstr, q_slate, q_witness),
          file=sys.stderr)


def _parse_time(s):
    try:
        return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=datetime.timezone.utc).timestamp()
    except (TypeError, ValueError):
        return float("nan")


def _witness_main(qname, out, stop, nthreads):
    sqs = s3_client("sqs", pool=nthreads + 2)
    url = queue_url(sqs, qname)

    def loop():
        while not stop.is_set():
            try:
                r = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                        VisibilityTimeout=600)
            except Exception as e:   # noqa: BLE001 (report and go on: moto may be busy)
                print("python: witness receive failed: %s" % e, file=sys.stderr, flush=True)
                time.sleep(0.2)
                continue
            t_mono, t_wall = time.monotonic(), time.time()
            msgs = r.get("Messages", [])
            if not msgs:
                continue
            batch = []
            for m in msgs:
                try:
                    body = json.loads(m["Body"])
                except ValueError:
                    continue
                for rec in body.get("Records", []):   # the s3:TestEvent has none
                    o = rec.get("s3", {}).get("object", {})
                    batch.append((t_mono, rec.get("eventName", ""), urllib.parse.unquote_plus(o.get("key", "")),
                                  o.get("size", -1), t_wall - _parse_time(rec.get("eventTime"))))
            if batch:
                out.put(batch)
            try:
                sqs.delete_message_batch(QueueUrl=url, Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)])
            except Exception as e:   # noqa: BLE001
                print("python: witness delete failed: %s" % e, file=sys.stderr, flush=True)

    ts = [threading.Thread(target=loop, daemon=True) for _ in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


class Witness:
    """Receives DST_slate's notifications in a forked process with a few long-polling threads;
    get() yields lists of (monotonic receive time, eventName, key, size, lag s) where lag is
    receive wall time − the event's eventTime (how long the event waited for us)."""

    def __init__(self, qname, nthreads=3):
        ctx = mp.get_context("fork")
        self.q = ctx.Queue()
        self.stop_ev = ctx.Event()
        self.p = ctx.Process(target=_witness_main, args=(qname, self.q, self.stop_ev, nthreads), daemon=True)
        self.p.start()

    def get(self, timeout):
        try:
            return self.q.get(timeout=timeout)
        except queue_mod.Empty:
            if not self.p.is_alive():
                die("the witness process died")
            return []

    def close(self):
        self.stop_ev.set()
        self.p.join(10)
        if self.p.is_alive():
            self.p.terminate()


def drain(qname):
    """Drop whatever waits in the witness queue (the TestEvent, stale events); returns how many
    S3 event messages were dropped."""
    sqs = s3_client("sqs")
    url = queue_url(sqs, qname)
    n = empty = 0
    while empty < 2:
        r = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0, VisibilityTimeout=600)
        msgs = r.get("Messages", [])
        if not msgs:
            empty += 1
            time.sleep(0.05)
            continue
        n += sum(1 for m in msgs if '"Records"' in m.get("Body", ""))   # not the s3:TestEvent
        sqs.delete_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)])
    return n


def sqs_backlog(sqs, url):
    """Messages in a queue: visible + in flight (ApproximateNumberOf…)."""
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    return int(a["ApproximateNumberOfMessages"]) + int(a["ApproximateNumberOfMessagesNotVisible"])


def s3_changes(src, dst, q_witness, run, n_changes, timeout, list_out):
    """Apply n_changes to src through S3, then wait until dst mirrors src on every changed
    key: the witness reports each key's arrival (a Created event with the new size, or a
    Removed event); then all of them are confirmed by HEAD (size, or 404). Prints:
    ms_to_equal dst_events apply_ms confirms. Writes the changed keys to list_out."""
    store = S3(src)
    ops, payload = plan_changes(store, run, n_changes)
    expect = {p: None if data is None else len(data) for p, data in payload.items()}   # key -> size
    stale = drain(q_witness)
    if stale:
        print("python: %d stale events in the witness queue before run %d (dropped)" % (stale, run), file=sys.stderr)
    w = Witness(q_witness)
    time.sleep(0.3)      # the witness' first long polls are in place
    t_first, t_last = apply_changes(store, ops, payload)
    dst_store = S3(dst, store.s3)
    arrived = {}         # key -> monotonic receive time of the matching event
    events = 0
    deadline = t_last + timeout
    confirms = 0
    while True:
        for t, name, key, size, _lag in w.get(0.5 if len(arrived) < len(expect) else 0):
            events += 1
            if key not in expect or key in arrived:
                continue
            want = expect[key]
            if (want is None and name.startswith("ObjectRemoved")) or \
               (want is not None and name.startswith("ObjectCreated") and size == want):
                arrived[key] = t
        if len(arrived) == len(expect):
            # all seen: confirm by HEAD that every key really is equal now
            confirms += 1
            with cf.ThreadPoolExecutor(store.threads) as ex:
                got = dict(zip(expect, ex.map(dst_store.head, expect)))
            bad = [p for p, want in expect.items() if (got[p] is None) != (want is None)
                   or (want is not None and got[p][0] != want)]
            if not bad:
                break
            print("python: %d keys seen arriving but not equal by HEAD (run %d), e.g. %s; waiting on"
                  % (len(bad), run, ", ".join(bad[:3])), file=sys.stderr)
            for p in bad:
                del arrived[p]
        if time.monotonic() > deadline:
            w.close()
            pend = sorted(set(expect) - set(arrived))
            print("python: %d of %d changed keys still differ in %s %d s after the last change, e.g. %s"
                  % (len(pend), len(expect), dst, timeout, ", ".join(pend[:5])), file=sys.stderr)
            sys.exit(3)
    w.close()
    t_eq = max(arrived.values())
    write_list(list_out, expect)
    print("%.3f %d %.3f %d" % ((t_eq - t_last) * 1000, events, (t_last - t_first) * 1000, confirms))


def s3_verify(src, dst, list_in):
    """Every key of list_in is the same in dst as in src (size and ETag, or absent in both)."""
    a_store = S3(src)
    b_store = S3(dst, a_store.s3)
    keys = read_list(list_in)
    with cf.ThreadPoolExecutor(a_store.threads) as ex:
        a = list(ex.map(a_store.head, keys))
        b = list(ex.map(b_store.head, keys))
    bad = [k for k, x, y in zip(keys, a, b) if x != y]
    if bad:
        die("%d changed keys differ between %s and %s, e.g. %s" % (len(bad), src, dst, ", ".join(bad[:5])))
    print("ok")


def s3_same(src, dst):
    """dst holds exactly src's objects under data/ (key, size, ETag). Prints: count bytes."""
    a_store = S3(src)
    a, b = a_store.listing(), S3(dst, a_store.s3).listing()
    if a != b:
        only_a = sorted(set(a) - set(b))
        only_b = sorted(set(b) - set(a))
        diff = sorted(k for k in set(a) & set(b) if a[k] != b[k])
        die("%s/%s differs from %s/%s: %d missing (e.g. %s), %d extra (e.g. %s), %d different (e.g. %s)"
            % (dst, PREFIX, src, PREFIX, len(only_a), ", ".join(only_a[:3]), len(only_b), ", ".join(only_b[:3]),
               len(diff), ", ".join(diff[:3])))
    print("%d %d" % (len(a), sum(v[0] for v in a.values())))


def s3_latency(src, q_slate, q_witness, rate, seconds, n_folders, grace, nthreads):
    """PUT rate*seconds new 1 KiB objects (data/lat-R/dXXX/f-NNNNNN) at `rate` per second from
    nthreads threads; the witness records each one's arrival in DST_slate. Prints the latency
    summary, then lag_p50_ms lag_max_ms backlog_at_writer_end backlog_at_end (the messages
    waiting in the daemon's queue)."""
    total = rate * seconds
    stale = drain(q_witness)
    if stale:
        print("python: %d stale events in the witness queue before the %d/s phase (dropped)" % (stale, rate),
              file=sys.stderr)
    w = Witness(q_witness)
    store = S3(src, s3_client("s3", pool=nthreads + 4))
    keys = lat_keys(store, rate, total, n_folders)
    index = {k: i for i, k in enumerate(keys)}
    sqs = s3_client("sqs")
    url_slate = queue_url(sqs, q_slate)
    backlog_w = -1
    blob = os.urandom(total * KIB)
    written = [0.0] * total
    arrived = [0.0] * total
    time.sleep(0.5)
    ts, behind, errors = start_writers(keys, rate, nthreads, time.monotonic() + 0.1,
                                       lambda i: store.put(keys[i], blob[i * KIB:(i + 1) * KIB]), written)
    lags = []
    writer_done = 0.0
    left = total
    while True:
        for t, name, key, size, lag in w.get(0.2):
            i = index.get(key)
            if i is None or not name.startswith("ObjectCreated") or size != KIB or arrived[i]:
                continue
            arrived[i] = t
            lags.append(lag)
            left -= 1
        if not writer_done and not any(t.is_alive() for t in ts):
            writer_done = time.monotonic()
            if errors:
                w.close()
                die("%d PUTs failed at %d/s, e.g. %s" % (len(errors), rate, errors[0]))
            backlog_w = sqs_backlog(sqs, url_slate)
        if writer_done and (left == 0 or time.monotonic() > writer_done + grace):
            break
    w.close()
    backlog_end = sqs_backlog(sqs, url_slate)
    lags.sort()
    if not lags:
        lags = [float("nan")]
    print("%s %.1f %.1f %d %d" % (latency_summary(keys, written, arrived, writer_done, rate, behind),
                                  pct(lags, 0.5) * 1000, lags[-1] * 1000, backlog_w, backlog_end))


# =======================================================================================
# pubsub / azqueue modes: GCS or Azure Blob → a local folder
# =======================================================================================

def pubsub(method, name, body=None):
    h = Http("http://" + os.environ["BENCH_PUBSUB_HOST"])
    return h.request(method, "/v1/projects/test-project/subscriptions/" + name,
                     body=json.dumps(body).encode() if body is not None else b"",
                     headers={"Content-Type": "application/json"}, allow=(404,))


def cloud_setup(src, queue, n, per_folder):
    """A fresh bucket / container (and, azqueue, the queue); n random 1 KiB objects (azqueue:
    no events for these). Prints: n seconds."""
    store = cloud_store(src, queue)
    store.create()
    secs = seed(store, n, per_folder)
    print("%d %.1f" % (n, secs))


def sub_create(name):
    st, data, _ = pubsub("PUT", name, {"topic": "projects/test-project/topics/gcs-events",
                                       "ackDeadlineSeconds": 10})
    if st != 200:
        die("creating the subscription %s: HTTP %d %s" % (name, st, data[:200]))
    print("ok")


def cloud_teardown(src, queue, sub):
    """Subscription first (the deletes publish OBJECT_DELETE), then the objects, the bucket /
    container and the queue."""
    failed = False
    if sub != "-":
        try:
            pubsub("DELETE", sub)
        except Exception as e:   # noqa: BLE001 (go on with the rest)
            print("python: deleting the subscription %s failed: %s" % (sub, e), file=sys.stderr)
            failed = True
    try:
        n = cloud_store(src, queue).drop()
    except Exception as e:   # noqa: BLE001
        print("python: removing %s / queue %s failed: %s" % (src, queue, e), file=sys.stderr)
        sys.exit(2)
    print("python: removed %s (%d objects)%s%s" % (src, n, " and queue " + queue if queue != "-" else "",
                                                  " and subscription " + sub if sub != "-" else ""),
          file=sys.stderr)
    if failed:
        sys.exit(2)


def sas(container):
    """A container SAS URL (read, list) for rclone, signed with Azurite's well-known key."""
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas
    token = generate_container_sas(AZ_ACCOUNT, container, account_key=AZ_KEY,
                                   permission=ContainerSasPermissions(read=True, list=True),
                                   expiry=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=12))
    print("%s/%s?%s" % (os.environ["BENCH_AZ_BLOB"].rstrip("/"), container, token))


def local_state(store, dst, key):
    data = read_or_none(local_path(dst, store, key))
    return None if data is None else (len(data), md5b64(data))


def listed_state(store, listed, key):
    """(size, MD5) of key from the store's listing (fetched when the listing has no MD5)."""
    w = listed.get(key)
    if w is not None and w[1] is None:
        data = store.get(key)
        w = None if data is None else (len(data), md5b64(data))
    return w


def cloud_verify(src, dst, list_in):
    """Every key of list_in is the same in the local folder dst as in src (size and MD5, or
    absent in both)."""
    store = cloud_store(src)
    want = store.listing()
    bad = [k for k in read_list(list_in) if local_state(store, dst, k) != listed_state(store, want, k)]
    if bad:
        die("%d changed keys differ between %s and %s, e.g. %s" % (len(bad), src, dst, ", ".join(bad[:5])))
    print("ok")


def cloud_same(src, dst):
    """The local folder dst holds exactly src's objects under data/ (size and MD5). Prints:
    count bytes."""
    store = cloud_store(src)
    want = store.listing()
    have = set()
    for root, _, names in os.walk(dst):
        for nm in names:
            have.add(PREFIX + os.path.relpath(os.path.join(root, nm), dst))
    missing = sorted(set(want) - have)
    extra = sorted(have - set(want))
    diff = [k for k in sorted(set(want) & have) if local_state(store, dst, k) != listed_state(store, want, k)]
    if missing or extra or diff:
        die("%s differs from %s/%s: %d missing (e.g. %s), %d extra (e.g. %s), %d different (e.g. %s)"
            % (dst, src, PREFIX, len(missing), ", ".join(missing[:3]), len(extra), ", ".join(extra[:3]),
               len(diff), ", ".join(diff[:3])))
    print("%d %d" % (len(want), sum(v[0] for v in want.values())))


def cloud_changes(src, queue, dst, run, n_changes, timeout, list_out):
    """Apply n_changes to src (azqueue: each followed by its event on the queue), then read the
    changed paths in the local folder dst every ~2 ms until each holds the new bytes (or is
    gone). Prints: ms_to_equal passes apply_ms. Writes the changed keys to list_out."""
    store = cloud_store(src, queue)
    ops, expect = plan_changes(store, run, n_changes)
    t_first, t_last = apply_changes(store, ops, expect)   # azqueue: t_last is the last event post
    t_eq, passes = wait_local(store, dst, expect, t_last, timeout, "keys")
    write_list(list_out, expect)
    print("%.3f %d %.3f" % ((t_eq - t_last) * 1000, passes, (t_last - t_first) * 1000))


def _cloud_poll(dst, sub, n_folders, total, rate, t0, writer_done, arrived, grace):
    """Poller process: object i is looked for in dst once it is due (t0 + i/rate), until it is
    there with its full size. Few pending in a folder: stat each; many: list the folder."""
    pending = [dict() for _ in range(n_folders)]     # folder -> {name: index}
    dirs = [os.path.join(dst, sub, "d%03d" % j) for j in range(n_folders)]
    seen = 0
    while True:
        due = min(total, int((time.monotonic() - t0) * rate) + 1) if time.monotonic() >= t0 else 0
        while seen < due:
            pending[seen % n_folders]["f-%06d" % seen] = seen
            seen += 1
        for j in range(n_folders):
            pend = pending[j]
            if not pend:
                continue
            if len(pend) > 32:
                try:
                    names = set(os.listdir(dirs[j]))
                except FileNotFoundError:
                    continue
                cand = [nm for nm in pend if nm in names]
            else:
                cand = list(pend)
            for name in cand:
                try:
                    st = os.stat(os.path.join(dirs[j], name))
                except FileNotFoundError:
                    continue
                if st.st_size == KIB:
                    arrived[pend.pop(name)] = time.monotonic()
        done_at = writer_done.value
        if done_at > 0 and seen == total and not any(pending):
            return
        if done_at > 0 and time.monotonic() > done_at + grace:
            return
        time.sleep(0.002)


def inbox_count(db):
    """Keys waiting in the daemon's inbox (received, not yet applied), read-only; -1: unknown."""
    try:
        import sqlite3
        c = sqlite3.connect("file:%s?mode=ro" % urllib.parse.quote(db), uri=True, timeout=5)
        try:
            return c.execute("SELECT COUNT(*) FROM inbox").fetchone()[0]
        finally:
            c.close()
    except Exception:   # noqa: BLE001 (a figure for the report, not a check)
        return -1


def cloud_latency(src, queue, dst, db, rate, seconds, n_folders, grace, nthreads):
    """Write rate*seconds new 1 KiB objects (data/lat-R/dXXX/f-NNNNNN) at `rate` per second
    from nthreads threads (azqueue: blob, then its event); a forked poller records each one's
    arrival in the local folder dst. Prints the latency summary, then backlog_at_writer_end
    backlog_at_end (messages in the daemon's queue; -1: unknown) inbox_at_writer_end (keys in
    the daemon's inbox, its database db)."""
    total = rate * seconds
    ctx = mp.get_context("fork")
    arrived = ctx.Array("d", total, lock=False)
    writer_done = ctx.Value("d", 0.0, lock=False)
    t0 = time.monotonic() + 0.5
    poller = ctx.Process(target=_cloud_poll, args=(dst, "lat-%d" % rate, n_folders, total, rate, t0, writer_done,
                                                   arrived, grace), daemon=True)
    poller.start()           # forked before any thread or connection exists
    store = cloud_store(src, queue)
    keys = lat_keys(store, rate, total, n_folders)
    blobs = [store.fresh(KIB) for _ in range(total)]
    written = [0.0] * total
    ts, behind, errors = start_writers(keys, rate, nthreads, t0, lambda i: store.put(keys[i], blobs[i]), written)
    for t in ts:
        t.join()
    writer_done.value = time.monotonic()
    check_writes(errors, rate, poller)
    backlog_w = store.backlog()
    inbox_w = inbox_count(db)
    join_poller(poller, grace)
    backlog_end = store.backlog()
    print("%s %d %d %d" % (latency_summary(keys, written, arrived, writer_done.value, rate, behind),
                           backlog_w, backlog_end, inbox_w))


# =======================================================================================
# Command line: MODE COMMAND ARGS...
# =======================================================================================

S, I, F = str, int, float
COMMANDS = {
    "local": {
        "seed": (local_seed, S, I, I),                       # SRC N PER_FOLDER
        "changes": (local_changes, S, S, I, I, F, S),        # SRC DST RUN CHANGES TIMEOUT LIST
        "verify": (local_verify, S, S, S),                   # SRC DST LIST
        "latency": (local_latency, S, S, I, I, I, F),        # SRC DST RATE SECONDS FOLDERS GRACE
    },
    "s3": {
        "setup": (s3_setup, S, S, S, S, S, I, I),            # SRC DST DST_RCLONE Q_SLATE Q_WITNESS N PER_FOLDER
        "witness-on": (s3_witness_on, S, S),                 # DST Q_WITNESS
        "changes": (s3_changes, S, S, S, I, I, F, S),        # SRC DST Q_WITNESS RUN CHANGES TIMEOUT LIST
        "verify": (s3_verify, S, S, S),                      # SRC DST LIST
        "same": (s3_same, S, S),                             # SRC DST
        "latency": (s3_latency, S, S, S, I, I, I, F, I),     # SRC Q_SLATE Q_WITNESS RATE SECONDS FOLDERS GRACE THREADS
        "teardown": (s3_teardown, S, S, S, S, S),            # SRC DST DST_RCLONE Q_SLATE Q_WITNESS
    },
    "cloud": {   # pubsub and azqueue
        "setup": (cloud_setup, S, S, I, I),                  # SRC QUEUE N PER_FOLDER
        "sub-create": (sub_create, S),                       # SUBSCRIPTION
        "sas": (sas, S),                                     # CONTAINER
        "changes": (cloud_changes, S, S, S, I, I, F, S),     # SRC QUEUE DST RUN CHANGES TIMEOUT LIST
        "verify": (cloud_verify, S, S, S),                   # SRC DST LIST
        "same": (cloud_same, S, S),                          # SRC DST
        "latency": (cloud_latency, S, S, S, S, I, I, I, F, I),   # SRC QUEUE DST DB RATE SECONDS FOLDERS GRACE THREADS
        "teardown": (cloud_teardown, S, S, S),               # SRC QUEUE SUBSCRIPTION
    },
}


def main():
    global MODE
    if len(sys.argv) < 3 or sys.argv[1] not in ("local", "s3", "pubsub", "azqueue"):
        die("usage: daemon_bench.py local|s3|pubsub|azqueue COMMAND ARGS...")
    MODE, cmd, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    table = COMMANDS["cloud" if MODE in ("pubsub", "azqueue") else MODE]
    if cmd not in table:
        die("unknown command %s for mode %s" % (cmd, MODE))
    fn, *types = table[cmd]
    if len(args) != len(types):
        die("%s %s: %d arguments expected, got %d" % (MODE, cmd, len(types), len(args)))
    fn(*(t(a) for t, a in zip(types, args)))


if __name__ == "__main__":
    main()
