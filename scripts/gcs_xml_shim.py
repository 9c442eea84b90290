#!/usr/bin/env python3
"""GCS XML-API shim in front of fake-gcs-server, for slate's tests. Python 3 stdlib only.

Why: object_store (0.14) talks to GCS through the XML API (PUT /BUCKET/OBJECT, XML multipart
uploads, copy via x-goog-copy-source, GET ?list-type=2). fake-gcs-server (1.54) serves the XML
API for reads, lists and deletes, but not for writes (fsouza/fake-gcs-server#331). This shim
listens on 127.0.0.1:PORT, translates the XML-API writes that object_store makes into
fake-gcs-server's JSON API, and proxies every other request unchanged (streaming).

Translated (one log line each on stderr):
  PUT    /B/O                            simple upload -> POST /upload/storage/v1/b/B/o?uploadType=multipart
                                         (metadata from Content-Type, Cache-Control,
                                         Content-Disposition, Content-Encoding, Content-Language,
                                         x-goog-storage-class, x-goog-meta-*; x-goog-acl as
                                         predefinedAcl)
  PUT    /B/O + x-goog-copy-source: B2/O2 copy -> POST /storage/v1/b/B2/o/O2/rewriteTo/b/B/o/O
  POST   /B/O?uploads                    start an XML multipart upload (parts kept in temp files)
  PUT    /B/O?partNumber=N&uploadId=U    store one part, ETag = quoted MD5 hex of the part
  POST   /B/O?uploadId=U                 CompleteMultipartUpload: the listed parts, in order,
                                         become one object (one upload, one finalize event)
  DELETE /B/O?uploadId=U                 abort, drop the parts
  GET    /B/O?uploadId=U                 ListParts: the parts stored so far (number, ETag, size)
Emulated because fake-gcs-server ignores them:
  x-goog-if-generation-match on the writes above (0 = only if absent; else the live generation);
  If-Match / If-None-Match / If-Modified-Since / If-Unmodified-Since on GET and HEAD of objects;
  XML list requests (GET /B?list-type=2): start-after, max-keys and continuation tokens,
  which fake-gcs-server ignores (it answers with every key).

Responses carry what object_store reads: ETag (the same quoted value fake-gcs-server's GET/HEAD
return) and x-goog-generation; InitiateMultipartUploadResult/UploadId and
CompleteMultipartUploadResult/ETag as XML bodies.

Usage: gcs_xml_shim.py --port 4444 --upstream http://127.0.0.1:4443 [--tmpdir DIR] [--verbose]
Health check: GET /_shim/health answers "ok".
"""

import argparse
import base64
import hashlib
import http.client
import http.server
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from xml.sax.saxutils import escape

CHUNK = 1 << 20
UPSTREAM_TIMEOUT = 300
MAX_PART_NUMBER = 10000

# Headers that belong to one connection and are never forwarded.
HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "trailers", "transfer-encoding", "upgrade", "expect", "host",
}
# Paths of fake-gcs-server's own (JSON/upload/download/batch) APIs: always proxied as they are.
NATIVE_PREFIXES = ("/storage/", "/upload/", "/download/", "/batch/", "/_internal/")

CONDITIONAL_HEADERS = ("If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since")


def log(msg):
    print(f"[gcs-shim {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def q(name):
    """Percent-encode a bucket or object name as one URL path segment / query value."""
    return urllib.parse.quote(name, safe="")


class ShimError(Exception):
    """An error answered to the client as a GCS XML error document."""

    def __init__(self, status, code, message):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def upstream_error(status, body, what):
    try:
        message = json.loads(body)["error"]["message"]
    except Exception:
        message = body[:200].decode("utf-8", "replace")
    code = {404: "NoSuchKey", 412: "PreconditionFailed"}.get(status, "UpstreamError")
    return ShimError(status, code, f"{what}: fake-gcs-server answered {status}: {message}")


def strip_etag(tag):
    """The opaque tag of an entity tag: W/"x" (weak) and "x" give x. Only a quoted tag can be
    weak: fake-gcs-server's ETags are unquoted base64 MD5s, and one in 4,096 starts with "W/"
    (stripping that made If-Match fail with 412 on such an object)."""
    tag = tag.strip()
    if tag.startswith('W/"'):
        tag = tag[2:]
    return tag.strip('"')


class MultipartUpload:
    def __init__(self, upload_id, bucket, name, attrs, if_generation_match, directory):
        self.id = upload_id
        self.bucket = bucket
        self.name = name
        self.attrs = attrs                      # object metadata given at initiation
        self.if_generation_match = if_generation_match
        self.dir = directory
        self.parts = {}                         # part number -> (path, size, etag)
        self.lock = threading.Lock()


class Shim:
    """State shared by all request threads."""

    def __init__(self, upstream, tmpdir):
        url = urllib.parse.urlsplit(upstream)
        if url.scheme != "http" or not url.hostname:
            raise SystemExit(f"--upstream must be http://HOST:PORT, not {upstream!r}")
        self.up_host, self.up_port = url.hostname, url.port or 80
        self.tmpdir = tmpdir
        self.uploads = {}
        self.uploads_lock = threading.Lock()
        self.object_locks = {}
        self.object_locks_lock = threading.Lock()

    def connect(self):
        return http.client.HTTPConnection(self.up_host, self.up_port, timeout=UPSTREAM_TIMEOUT)

    def object_lock(self, bucket, name):
        """One lock per object: a precondition check and the write it guards are atomic
        with respect to other writes through this shim."""
        with self.object_locks_lock:
            return self.object_locks.setdefault((bucket, name), threading.Lock())

    # ---- fake-gcs-server JSON API ------------------------------------------------------

    def call(self, method, path, body=None, headers=None):
        """A small JSON-API request; returns (status, body bytes)."""
        conn = self.connect()
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def object_meta(self, bucket, name, generation=None):
        """The object's JSON resource, or None if it does not exist."""
        path = f"/storage/v1/b/{q(bucket)}/o/{q(name)}"
        if generation:
            path += f"?generation={q(generation)}"
        status, body = self.call("GET", path)
        if status == 404:
            return None
        if status != 200:
            raise upstream_error(status, body, f"metadata of {bucket}/{name}")
        return json.loads(body)

    def bucket_exists(self, bucket):
        status, body = self.call("GET", f"/storage/v1/b/{q(bucket)}")
        if status not in (200, 404):
            raise upstream_error(status, body, f"bucket {bucket}")
        return status == 200

    def check_generation(self, bucket, name, expected):
        """x-goog-if-generation-match: '0' means the object must not exist, any other value
        must equal the live generation. Raises 412 otherwise."""
        if expected is None:
            return
        meta = self.object_meta(bucket, name)
        current = meta["generation"] if meta else None
        if expected.strip() == "0":
            if current is not None:
                raise ShimError(412, "PreconditionFailed",
                                f"{bucket}/{name} exists (generation {current}), "
                                "x-goog-if-generation-match: 0")
        elif current != expected.strip():
            raise ShimError(412, "PreconditionFailed",
                            f"{bucket}/{name} has generation {current}, "
                            f"x-goog-if-generation-match: {expected}")

    def upload(self, bucket, name, attrs, sources):
        """Create BUCKET/NAME from the concatenation of `sources` (list of (file, size)) with a
        single multipart/related upload, streamed. Returns the new object's JSON resource."""
        meta = dict(attrs, name=name)
        acl = meta.pop("_predefinedAcl", None)
        query = f"&predefinedAcl={q(acl)}" if acl else ""
        boundary = "shim-" + uuid.uuid4().hex
        content_type = attrs.get("contentType", "application/octet-stream")
        head = (f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n"
                f"{json.dumps(meta)}\r\n"
                f"--{boundary}\r\nContent-Type: {content_type}\r\n\r\n").encode()
        tail = f"\r\n--{boundary}--\r\n".encode()
        length = len(head) + sum(size for _, size in sources) + len(tail)

        conn = self.connect()
        try:
            conn.putrequest("POST", f"/upload/storage/v1/b/{q(bucket)}/o?uploadType=multipart{query}",
                            skip_accept_encoding=True)
            conn.putheader("Content-Type", f"multipart/related; boundary={boundary}")
            conn.putheader("Content-Length", str(length))
            conn.endheaders()
            conn.send(head)
            for f, size in sources:
                f.seek(0)
                left = size
                while left:
                    chunk = f.read(min(CHUNK, left))
                    if not chunk:
                        raise ShimError(500, "InternalError", "temp file shorter than expected")
                    conn.send(chunk)
                    left -= len(chunk)
            conn.send(tail)
            resp = conn.getresponse()
            body = resp.read()
        finally:
            conn.close()
        if resp.status != 200:
            raise upstream_error(resp.status, body, f"upload of {bucket}/{name}")
        return json.loads(body)


# The XML API's canned ACL names and the JSON API's predefinedAcl values.
XML_ACLS = {
    "private": "private",
    "project-private": "projectPrivate",
    "public-read": "publicRead",
    "public-read-write": "publicReadWrite",
    "authenticated-read": "authenticatedRead",
    "bucket-owner-read": "bucketOwnerRead",
    "bucket-owner-full-control": "bucketOwnerFullControl",
}


def attrs_from_headers(headers):
    """Object metadata (JSON API field names) from XML-API request headers."""
    attrs, metadata = {}, {}
    for header, field in (("Content-Type", "contentType"), ("Cache-Control", "cacheControl"),
                          ("Content-Disposition", "contentDisposition"),
                          ("Content-Encoding", "contentEncoding"),
                          ("Content-Language", "contentLanguage"),
                          ("x-goog-storage-class", "storageClass")):
        value = headers.get(header)
        if value is not None:
            attrs[field] = value
    for key, value in headers.items():
        if key.lower().startswith("x-goog-meta-"):
            metadata[key[len("x-goog-meta-"):].lower()] = value
    # x-goog-acl (the XML API's canned ACL) is the JSON API's predefinedAcl parameter
    canned = headers.get("x-goog-acl")
    if canned:
        attrs["_predefinedAcl"] = XML_ACLS.get(canned, canned)
    if metadata:
        attrs["metadata"] = metadata
    return attrs


def result_headers(obj):
    """Headers of a successful write, as GCS's XML API sends them."""
    return [("ETag", f'"{obj["etag"]}"'),
            ("x-goog-generation", str(obj["generation"])),
            ("x-goog-metageneration", str(obj.get("metageneration", "1"))),
            ("x-goog-hash", f'crc32c={obj.get("crc32c", "")},md5={obj.get("md5Hash", "")}')]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"     # keep-alive: object_store pools its connections
    server_version = "slate-gcs-xml-shim"
    shim: Shim = None
    verbose = False

    # ---- plumbing ----------------------------------------------------------------------

    def log_message(self, fmt, *args):
        if self.verbose:
            log("%s %s" % (self.address_string(), fmt % args))

    def do_GET(self): self.dispatch()
    def do_HEAD(self): self.dispatch()
    def do_PUT(self): self.dispatch()
    def do_POST(self): self.dispatch()
    def do_DELETE(self): self.dispatch()
    def do_PATCH(self): self.dispatch()
    def do_OPTIONS(self): self.dispatch()

    def body_chunks(self):
        """The request body, as it arrives (Content-Length or chunked). Read at most once."""
        if self._body_read:
            return
        self._body_read = True
        yield from self._read_body()
        self._body_done = True

    def _read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass   # trailers
                    return
                left = size
                while left:
                    chunk = self.rfile.read(min(CHUNK, left))
                    if not chunk:
                        raise ConnectionError("client closed the connection mid-body")
                    left -= len(chunk)
                    yield chunk
                self.rfile.readline(3)
        else:
            left = int(self.headers.get("Content-Length") or 0)
            while left:
                chunk = self.rfile.read(min(CHUNK, left))
                if not chunk:
                    raise ConnectionError("client closed the connection mid-body")
                left -= len(chunk)
                yield chunk

    def spool_body(self, path=None):
        """Store the request body in a temp file (or at `path`); returns (file, size, md5 hex)."""
        f = open(path, "w+b") if path else tempfile.TemporaryFile(dir=self.shim.tmpdir)
        md5, size = hashlib.md5(), 0
        try:
            for chunk in self.body_chunks():
                f.write(chunk)
                md5.update(chunk)
                size += len(chunk)
            f.flush()
        except BaseException:
            f.close()
            raise
        return f, size, md5.hexdigest()

    def read_small_body(self, limit=16 << 20):
        data = b"".join(self.body_chunks())
        if len(data) > limit:
            raise ShimError(400, "InvalidArgument", "request body too large")
        return data

    def reply(self, status, headers=(), body=b"", content_type=None):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def reply_xml(self, status, xml, headers=()):
        body = ("<?xml version='1.0' encoding='UTF-8'?>" + xml).encode()
        self.reply(status, headers, body, "application/xml; charset=UTF-8")

    def reply_error(self, err):
        self.reply_xml(err.status, f"<Error><Code>{escape(err.code)}</Code>"
                                   f"<Message>{escape(err.message)}</Message></Error>")

    # ---- routing -----------------------------------------------------------------------

    def dispatch(self):
        self._body_read = self._body_done = False
        split = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(split.query, keep_blank_values=True)
        what = "proxy"
        try:
            if split.path == "/_shim/health":
                what = "health"
                return self.reply(200, body=b"ok\n", content_type="text/plain")
            bucket = name = None
            if not split.path.startswith(NATIVE_PREFIXES):
                segments = split.path.lstrip("/").split("/", 1)
                try:
                    bucket = urllib.parse.unquote(segments[0], errors="strict")
                    if len(segments) == 2 and segments[1]:
                        name = urllib.parse.unquote(segments[1], errors="strict")
                except UnicodeDecodeError:
                    raise ShimError(400, "InvalidArgument", "name is not valid UTF-8")
            m = self.command
            if name is not None:
                if m == "PUT" and "x-goog-copy-source" in self.headers:
                    what = "copy"
                    return self.copy(bucket, name)
                if m == "PUT" and "uploadId" in query:
                    what = "put part"
                    return self.put_part(bucket, name, query)
                if m == "PUT":
                    what = "put"
                    return self.put(bucket, name)
                if m == "POST" and "uploads" in query:
                    what = "initiate multipart"
                    return self.initiate(bucket, name)
                if m == "POST" and "uploadId" in query:
                    what = "complete multipart"
                    return self.complete(bucket, name, query)
                if m == "DELETE" and "uploadId" in query:
                    what = "abort multipart"
                    return self.abort(bucket, name, query)
                if m == "GET" and "uploadId" in query:
                    what = "list parts"
                    return self.list_parts(bucket, name, query)
                if m in ("GET", "HEAD") and any(h in self.headers for h in CONDITIONAL_HEADERS):
                    if self.conditional_get(bucket, name, query):
                        return
            elif bucket and m == "GET" and "list-type" in query:
                what = "list"
                return self.list_v2(bucket, query)
            return self.proxy()
        except ShimError as err:
            if not self._body_read:
                for _ in self.body_chunks():
                    pass  # drain the unread body, so the connection stays usable
            elif not self._body_done:
                self.close_connection = True   # body half read: this connection is spent
            log(f"{self.command} {self.path} ({what}) -> {err.status} {err.code}: {err.message}")
            self.reply_error(err)
        except (ConnectionError, TimeoutError) as err:
            log(f"{self.command} {self.path} ({what}) -> connection error: {err}")
            self.close_connection = True
        except Exception as err:  # a bug here: answer 500 rather than hanging up
            log(f"{self.command} {self.path} ({what}) -> 500: {err!r}")
            self.close_connection = True
            try:
                self.reply_error(ShimError(500, "InternalError", repr(err)))
            except Exception:
                pass

    # ---- XML-API writes ----------------------------------------------------------------

    def put(self, bucket, name):
        f, size, _ = self.spool_body()
        with f, self.shim.object_lock(bucket, name):
            self.shim.check_generation(bucket, name, self.headers.get("x-goog-if-generation-match"))
            obj = self.shim.upload(bucket, name, attrs_from_headers(self.headers), [(f, size)])
        log(f"PUT {bucket}/{name} ({size} bytes) -> 200 generation {obj['generation']}")
        self.reply(200, result_headers(obj))

    def copy(self, bucket, name):
        self.read_small_body()
        source = self.headers["x-goog-copy-source"].lstrip("/")
        if "/" not in source:
            raise ShimError(400, "InvalidArgument", f"bad x-goog-copy-source: {source!r}")
        src_bucket, src_name = (urllib.parse.unquote(p) for p in source.split("/", 1))
        with self.shim.object_lock(bucket, name):
            self.shim.check_generation(bucket, name, self.headers.get("x-goog-if-generation-match"))
            status, body = self.shim.call(
                "POST", f"/storage/v1/b/{q(src_bucket)}/o/{q(src_name)}"
                        f"/rewriteTo/b/{q(bucket)}/o/{q(name)}",
                body=b"", headers={"Content-Length": "0"})
        if status != 200:
            raise upstream_error(status, body, f"copy {src_bucket}/{src_name} -> {bucket}/{name}")
        obj = json.loads(body)
        obj = obj.get("resource", obj)
        log(f"PUT {bucket}/{name} (copy from {src_bucket}/{src_name}) -> 200 "
            f"generation {obj['generation']}")
        self.reply_xml(200, f"<CopyObjectResult><LastModified>{escape(obj.get('updated', ''))}"
                            f"</LastModified><ETag>\"{escape(obj['etag'])}\"</ETag>"
                            f"</CopyObjectResult>", result_headers(obj))

    def initiate(self, bucket, name):
        self.read_small_body()
        if not self.shim.bucket_exists(bucket):
            raise ShimError(404, "NoSuchBucket", f"bucket {bucket} does not exist")
        upload_id = uuid.uuid4().hex
        directory = os.path.join(self.shim.tmpdir, upload_id)
        os.mkdir(directory)
        upload = MultipartUpload(upload_id, bucket, name, attrs_from_headers(self.headers),
                                 self.headers.get("x-goog-if-generation-match"), directory)
        with self.shim.uploads_lock:
            self.shim.uploads[upload_id] = upload
        log(f"POST {bucket}/{name}?uploads -> 200 uploadId {upload_id}")
        self.reply_xml(200, f"<InitiateMultipartUploadResult><Bucket>{escape(bucket)}</Bucket>"
                            f"<Key>{escape(name)}</Key><UploadId>{upload_id}</UploadId>"
                            f"</InitiateMultipartUploadResult>")

    def find_upload(self, bucket, name, query):
        upload_id = query["uploadId"][0]
        with self.shim.uploads_lock:
            upload = self.shim.uploads.get(upload_id)
        if upload is None or (upload.bucket, upload.name) != (bucket, name):
            raise ShimError(404, "NoSuchUpload", f"no multipart upload {upload_id!r} for {bucket}/{name}")
        return upload

    def put_part(self, bucket, name, query):
        upload = self.find_upload(bucket, name, query)
        try:
            number = int(query.get("partNumber", [""])[0])
        except ValueError:
            number = 0
        if not 1 <= number <= MAX_PART_NUMBER:
            raise ShimError(400, "InvalidArgument", f"partNumber must be 1..{MAX_PART_NUMBER}")
        # Write beside the final name, then rename: a retried part replaces the old one whole.
        final = os.path.join(upload.dir, f"part-{number:05d}")
        tmp = f"{final}.{uuid.uuid4().hex}.tmp"
        try:
            f, size, md5 = self.spool_body(tmp)
        except FileNotFoundError:   # aborted or completed meanwhile
            raise ShimError(404, "NoSuchUpload", f"multipart upload {upload.id} is gone")
        f.close()
        etag = f'"{md5}"'
        with upload.lock:
            if not os.path.isdir(upload.dir):
                raise ShimError(404, "NoSuchUpload", f"multipart upload {upload.id} is gone")
            os.replace(tmp, final)
            upload.parts[number] = (final, size, etag)
        log(f"PUT {bucket}/{name}?partNumber={number}&uploadId={upload.id} ({size} bytes) -> 200")
        self.reply(200, [("ETag", etag)])

    def complete(self, bucket, name, query):
        upload = self.find_upload(bucket, name, query)
        data = self.read_small_body()
        try:
            root = ET.fromstring(data)
        except ET.ParseError as err:
            raise ShimError(400, "MalformedXML", f"CompleteMultipartUpload: {err}")
        listed = []
        for part in root.iter():
            if part.tag.rsplit("}", 1)[-1] != "Part":
                continue
            fields = {child.tag.rsplit("}", 1)[-1]: (child.text or "") for child in part}
            try:
                listed.append((int(fields["PartNumber"]), fields.get("ETag", "")))
            except (KeyError, ValueError):
                raise ShimError(400, "MalformedXML", "Part without a valid PartNumber")
        if not listed:
            raise ShimError(400, "MalformedXML", "CompleteMultipartUpload lists no parts")
        numbers = [n for n, _ in listed]
        if numbers != sorted(set(numbers)):
            raise ShimError(400, "InvalidPartOrder", "parts must be listed in ascending order")

        with upload.lock, self.shim.object_lock(bucket, name):
            sources = []
            try:
                for number, etag in listed:
                    if number not in upload.parts:
                        raise ShimError(400, "InvalidPart", f"part {number} was not uploaded")
                    path, size, stored_etag = upload.parts[number]
                    if strip_etag(etag) != strip_etag(stored_etag):
                        raise ShimError(400, "InvalidPart",
                                        f"part {number}: ETag {etag} != {stored_etag}")
                    sources.append((open(path, "rb"), size))
                self.shim.check_generation(bucket, name, upload.if_generation_match)
                obj = self.shim.upload(bucket, name, upload.attrs, sources)
            finally:
                for f, _ in sources:
                    f.close()
            with self.shim.uploads_lock:
                self.shim.uploads.pop(upload.id, None)
            shutil.rmtree(upload.dir, ignore_errors=True)
        total = sum(size for _, size in sources)
        log(f"POST {bucket}/{name}?uploadId={upload.id} (complete: {len(listed)} parts, "
            f"{total} bytes) -> 200 generation {obj['generation']}")
        location = f"http://{self.shim.up_host}:{self.shim.up_port}/{q(bucket)}/{q(name)}"
        self.reply_xml(200, f"<CompleteMultipartUploadResult><Location>{escape(location)}</Location>"
                            f"<Bucket>{escape(bucket)}</Bucket><Key>{escape(name)}</Key>"
                            f"<ETag>\"{escape(obj['etag'])}\"</ETag>"
                            f"</CompleteMultipartUploadResult>", result_headers(obj))

    def abort(self, bucket, name, query):
        self.read_small_body()
        upload = self.find_upload(bucket, name, query)
        with upload.lock:
            with self.shim.uploads_lock:
                self.shim.uploads.pop(upload.id, None)
            shutil.rmtree(upload.dir, ignore_errors=True)
        log(f"DELETE {bucket}/{name}?uploadId={upload.id} (abort) -> 204")
        self.reply(204)

    def list_parts(self, bucket, name, query):
        """ListParts, as GCS's XML API answers it (S3's schema), all parts on one page."""
        self.read_small_body()
        upload = self.find_upload(bucket, name, query)
        with upload.lock:
            parts = sorted(upload.parts.items())
        xml = "".join(
            f"<Part><PartNumber>{n}</PartNumber><ETag>{escape(etag)}</ETag><Size>{size}</Size></Part>"
            for n, (_path, size, etag) in parts)
        log(f"GET {bucket}/{name}?uploadId={upload.id} (list parts) -> 200, {len(parts)} parts")
        self.reply_xml(200, f"<ListPartsResult><Bucket>{escape(bucket)}</Bucket>"
                            f"<Key>{escape(name)}</Key><UploadId>{upload.id}</UploadId>"
                            f"<IsTruncated>false</IsTruncated>{xml}</ListPartsResult>")

    # ---- reads fake-gcs-server gets wrong ----------------------------------------------

    def conditional_get(self, bucket, name, query):
        """Evaluate If-* headers (RFC 9110 order) that fake-gcs-server ignores. Returns True
        if it answered 304/412 itself, False to let the request through."""
        self.read_small_body()
        meta = self.shim.object_meta(bucket, name, query.get("generation", [None])[0])
        if meta is None:
            return False                      # fake-gcs-server answers the 404
        etag = meta["etag"]
        updated = datetime.strptime(meta["updated"][:19], "%Y-%m-%dT%H:%M:%S").replace(
            tzinfo=timezone.utc)

        def matches(header):
            tags = [strip_etag(t) for t in header.split(",")]
            return "*" in tags or etag in tags

        def date(header):
            try:
                d = parsedate_to_datetime(header)
            except (TypeError, ValueError):
                return None
            return d if d.tzinfo else d.replace(tzinfo=timezone.utc)

        h = self.headers
        status = None
        if h.get("If-Match") is not None:
            if not matches(h["If-Match"]):
                status = 412
        elif h.get("If-Unmodified-Since") and date(h["If-Unmodified-Since"]):
            if updated > date(h["If-Unmodified-Since"]):
                status = 412
        if status is None:
            if h.get("If-None-Match") is not None:
                if matches(h["If-None-Match"]):
                    status = 304
            elif h.get("If-Modified-Since") and date(h["If-Modified-Since"]):
                if updated <= date(h["If-Modified-Since"]):
                    status = 304
        if status is None:
            return False
        log(f"{self.command} {bucket}/{name} (conditional) -> {status}")
        headers = [("ETag", f'"{etag}"'), ("x-goog-generation", str(meta["generation"]))]
        if status == 304:
            self.send_response(304)
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
        else:
            self.reply_xml(412, "<Error><Code>PreconditionFailed</Code><Message>"
                                "At least one of the pre-conditions you specified did not hold."
                                "</Message></Error>", headers)
        return True

    def list_v2(self, bucket, query):
        """XML list (ListObjectsV2) as GCS answers it: fake-gcs-server ignores start-after,
        max-keys and continuation tokens and answers with every key, so its whole answer is
        asked for here (prefix and delimiter only), then cut as S3 and GCS cut it: entries
        (keys and common prefixes together, in key order) after start-after and after the
        continuation token, at most max-keys of them, with IsTruncated and a
        NextContinuationToken (the last entry, encoded) when more follow."""
        first = lambda k, d="": query.get(k, [d])[0]
        start = first("start-after")
        token = first("continuation-token")
        # the token is the last entry sent: what follows comes strictly after it (a folder
        # sent already is not sent again, whatever start-after says)
        after = ""
        if token:
            try:
                after = base64.urlsafe_b64decode(token.encode()).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                raise ShimError(400, "InvalidArgument", "The continuation token is not valid")
        try:
            max_keys = int(first("max-keys", "1000"))
        except ValueError:
            raise ShimError(400, "InvalidArgument", "max-keys is not a number")
        max_keys = max(0, min(max_keys, 1000))
        upstream = {"list-type": "2"}
        for k in ("prefix", "delimiter"):
            if first(k):
                upstream[k] = first(k)
        path = "/" + urllib.parse.quote(bucket) + "?" + urllib.parse.urlencode(upstream)
        conn = self.shim.connect()
        try:
            conn.putrequest("GET", path, skip_accept_encoding=True)
            for k, v in self.forward_headers():
                if k.lower() != "accept-encoding":   # the XML is parsed here: no gzip
                    conn.putheader(k, v)
            conn.endheaders()
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                return self.reply(resp.status, self.response_headers(resp), body)
        finally:
            conn.close()
        root = ET.fromstring(body)
        entries = []
        for child in list(root):
            tag = child.tag.rsplit("}", 1)[-1]
            if tag == "Contents":
                key = child.findtext("Key") or child.findtext("{*}Key") or ""
                if key > start and key > after:   # code-point order == UTF-8 byte order
                    entries.append((key, child))
                root.remove(child)
            elif tag == "CommonPrefixes":
                prefix = child.findtext("Prefix") or child.findtext("{*}Prefix") or ""
                # a folder holds keys after `start` when it sorts after it or `start` is in it
                in_start = prefix > start or (start and start.startswith(prefix) and prefix != start)
                if in_start and prefix > after:
                    entries.append((prefix, child))
                root.remove(child)
            elif tag in ("IsTruncated", "NextContinuationToken", "KeyCount", "MaxKeys",
                         "ContinuationToken", "StartAfter"):
                root.remove(child)
        entries.sort(key=lambda e: e[0])
        page, rest = entries[:max_keys], entries[max_keys:]
        for _, child in page:
            root.append(child)
        def add(tag, text):
            el = ET.SubElement(root, tag)
            el.text = text
        add("KeyCount", str(len(page)))
        add("MaxKeys", str(max_keys))
        add("IsTruncated", "true" if rest else "false")
        if token:
            add("ContinuationToken", token)
        if first("start-after"):
            add("StartAfter", first("start-after"))
        if rest and page:
            add("NextContinuationToken",
                base64.urlsafe_b64encode(page[-1][0].encode("utf-8")).decode())
        out = ET.tostring(root, encoding="UTF-8", xml_declaration=True)
        log(f"GET {self.path} (list: {len(page)} of {len(entries)} entries after the start) -> 200")
        self.reply(200, body=out, content_type="application/xml")

    # ---- proxy -------------------------------------------------------------------------

    def forward_headers(self):
        return [(k, v) for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP]

    @staticmethod
    def response_headers(resp):
        return [(k, v) for k, v in resp.getheaders()
                if k.lower() not in HOP_BY_HOP | {"content-length", "date", "server"}]

    def proxy(self):
        """Forward the request as it is, streaming both bodies."""
        conn = self.shim.connect()
        try:
            conn.putrequest(self.command, self.path, skip_accept_encoding=True)
            for k, v in self.forward_headers():
                conn.putheader(k, v)
            chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
            if chunked:
                conn.putheader("Transfer-Encoding", "chunked")
            conn.endheaders()
            for chunk in self.body_chunks():
                conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
            if chunked:
                conn.send(b"0\r\n\r\n")
            resp = conn.getresponse()

            self.send_response(resp.status, resp.reason)
            for k, v in self.response_headers(resp):
                self.send_header(k, v)
            no_body = self.command == "HEAD" or resp.status in (204, 304) or resp.status < 200
            length = resp.getheader("Content-Length")
            if length is not None:
                self.send_header("Content-Length", length)
            elif not no_body:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if no_body:
                return
            sent = 0
            while True:
                chunk = resp.read1(CHUNK)
                if not chunk:
                    break
                sent += len(chunk)
                self.wfile.write(chunk if length is not None
                                 else b"%x\r\n%s\r\n" % (len(chunk), chunk))
            if length is None:
                self.wfile.write(b"0\r\n\r\n")
            elif sent != int(length):
                self.close_connection = True   # upstream cut the body short
        finally:
            conn.close()


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # A client dropping an idle keep-alive connection is normal, not worth a traceback.
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=4444)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--upstream", default="http://127.0.0.1:4443",
                    help="fake-gcs-server base URL (http)")
    ap.add_argument("--tmpdir", help="where multipart parts are kept (default: a new temp dir)")
    ap.add_argument("--verbose", action="store_true", help="also log every proxied request")
    args = ap.parse_args()

    tmpdir = args.tmpdir or tempfile.mkdtemp(prefix="slate-gcs-shim-")
    os.makedirs(tmpdir, exist_ok=True)
    Handler.shim = Shim(args.upstream, tmpdir)
    Handler.verbose = args.verbose
    server = QuietServer((args.host, args.port), Handler)
    server.daemon_threads = True
    log(f"listening on http://{args.host}:{args.port}, upstream {args.upstream}, parts in {tmpdir}")

    import signal
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if not args.tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)
        log("stopped")


if __name__ == "__main__":
    main()
