"""A Confluent-compatible schema registry client for the examples, on the standard library only.

With `schema_registry.urls` set, the ckf-stream processes register the contract's .avsc files
under the subject "<topic>-value" (topic names after topic_prefix) when they start, write the ids
the registry assigned in the Confluent frame, and accept the built-in ids too
(docs/producers-and-routers.md §3). A client then needs two questions answered, both here:

- the id of its own schema under its topic's subject, to write (`SchemaRegistry.lookup_id`:
  POST /subjects/{subject} with the schema text; nothing is registered);
- the writer's schema of an id it reads (`SchemaRegistry.writer_schema`: GET /schemas/ids/{id},
  cached), which `Reader` resolves to the local reader schema (Avro schema evolution).

Every failure is a `RegistryError` whose text is one line naming the registry and, where there
is one, the subject or id.
"""

import base64
import io
import json
import os
import urllib.error
import urllib.parse
import urllib.request

import fastavro

# The environment variables the examples read when the flags are not given: the processes' own
# (schema_registry.urls, .username, .password), so that one setting serves a deployment's
# processes and its clients, and a process never warns about a variable it does not know. Of a
# comma-separated list of URLs the examples take the first.
ENV_URL = "CKF_SCHEMA_REGISTRY_URLS"
ENV_USER = "CKF_SCHEMA_REGISTRY_USERNAME"
ENV_PASSWORD = "CKF_SCHEMA_REGISTRY_PASSWORD"

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryError(Exception):
    """The registry could not be reached, refused a request, or answered something unusable."""


class UnreadableRecord(Exception):
    """A record this client cannot read: an id it cannot resolve, or a body that is not the
    writer schema's Avro."""


def add_arguments(ap):
    """Adds --registry and --registry-user to an argparse parser, defaulting to the environment.
    The password is read from CKF_SCHEMA_REGISTRY_PASSWORD only, never from a flag (a flag
    shows in the process list)."""
    ap.add_argument("--registry", default=os.environ.get(ENV_URL, "").split(",")[0].strip(), metavar="URL",
                    help=f"base URL of a Confluent-compatible schema registry, as the processes' schema_registry.urls "
                         f"(default: the first of ${ENV_URL}; empty: the built-in schema ids)")
    ap.add_argument("--registry-user", default=os.environ.get(ENV_USER, ""), metavar="USER",
                    help=f"basic-auth user of the registry (default ${ENV_USER}); the password is read from "
                         f"${ENV_PASSWORD} only")


def from_args(args, timeout):
    """The SchemaRegistry that parsed --registry/--registry-user name, or None without one."""
    if not args.registry:
        return None
    return SchemaRegistry(args.registry, args.registry_user, os.environ.get(ENV_PASSWORD, ""), timeout)


class SchemaRegistry:
    """One registry's Confluent API at a base URL (for Apicurio Registry:
    http://host:8080/apis/ccompat/v7). Each request is bounded by `timeout` seconds."""

    def __init__(self, url, user="", password="", timeout=10.0):
        self.url = url.rstrip("/")
        parsed = urllib.parse.urlsplit(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise RegistryError(f"registry URL {url!r} is not an http or https URL")
        self.timeout = timeout
        self._auth = None
        if user or password:
            token = base64.b64encode(f"{user}:{password}".encode("utf-8")).decode("ascii")
            self._auth = "Basic " + token
        self._schemas = {}  # id -> parsed writer schema

    def _request(self, method, path, body=None):
        """Sends one request and returns (HTTP status, decoded JSON or None). Raises RegistryError
        when the registry cannot be reached or answers something that is not JSON."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Accept", _CONTENT_TYPE + ", application/json")
        if data is not None:
            req.add_header("Content-Type", _CONTENT_TYPE)
        if self._auth:
            req.add_header("Authorization", self._auth)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise RegistryError(f"schema registry {self.url} not reachable: {reason}") from None
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            raise RegistryError(f"schema registry {self.url}: {method} {path} answered {status} "
                                f"with a body that is not JSON") from None

    def _refusal(self, what, status, answer):
        message = answer.get("message") if isinstance(answer, dict) else None
        return RegistryError(f"schema registry {self.url}: {what}: HTTP {status}" + (f": {message}" if message else ""))

    def lookup_id(self, subject, schema_text):
        """The id the registry holds for schema_text under subject (POST /subjects/{subject};
        nothing is registered). Raises RegistryError when the subject or that schema under it is
        missing: the ckf-stream processes register their schemas when they start, so it is
        missing until one of them (with the same topic names) has started against this registry."""
        path = "/subjects/" + urllib.parse.quote(subject, safe="")
        status, answer = self._request("POST", path, {"schema": schema_text})
        if status == 200 and isinstance(answer, dict) and isinstance(answer.get("id"), int):
            return answer["id"]
        if status == 404:
            code = answer.get("error_code") if isinstance(answer, dict) else None
            if code == 40403:  # the subject exists, with other schemas
                raise RegistryError(f"subject {subject} at schema registry {self.url} does not hold this schema "
                                    "(it holds others: are these .avsc files the processes' version?)")
            raise RegistryError(f"subject {subject} is not at schema registry {self.url}: {schemas_missing_hint()}")
        if status in (401, 403):
            raise self._refusal(f"looking up subject {subject} (check --registry-user and ${ENV_PASSWORD})",
                                status, answer)
        raise self._refusal(f"looking up subject {subject}", status, answer)

    def writer_schema(self, schema_id):
        """The parsed Avro schema the registry holds for schema_id (GET /schemas/ids/{id}), fetched
        once and then cached."""
        if schema_id in self._schemas:
            return self._schemas[schema_id]
        status, answer = self._request("GET", f"/schemas/ids/{schema_id}")
        if status == 404:
            raise RegistryError(f"schema id {schema_id} is unknown to schema registry {self.url}")
        if status != 200 or not isinstance(answer, dict) or not isinstance(answer.get("schema"), str):
            raise self._refusal(f"fetching schema id {schema_id}", status, answer)
        kind = answer.get("schemaType", "AVRO")
        if kind != "AVRO":
            raise RegistryError(f"schema registry {self.url}: schema id {schema_id} is {kind}, not Avro")
        try:
            parsed = fastavro.parse_schema(json.loads(answer["schema"]))
        except (ValueError, fastavro.schema.SchemaParseException) as e:
            raise RegistryError(f"schema registry {self.url}: schema id {schema_id} is not a valid Avro schema: {e}") from None
        self._schemas[schema_id] = parsed
        return parsed


def schemas_missing_hint():
    """Why a subject may lack a schema, and what registers it."""
    return "the relay and the indexer register the contract's schemas under <topic>-value when they start " \
           "with schema_registry.urls set; start one against this registry first, with the same topic names"


class Reader:
    """Decodes Confluent-framed values of one record type into the local reader schema.

    The built-in id is read with the local schema directly. Any other id is resolved through the
    registry: the writer's schema is fetched by id and fastavro resolves it to the local schema,
    so a writer one schema version ahead or behind still reads (fields added with defaults are
    filled, fields the reader lacks are skipped). Without a registry any other id is refused."""

    def __init__(self, reader_schema, builtin_id, registry=None, what="record"):
        self.what = what  # names the record in messages: "reply schema id 0x3 is not ..."
        self.reader_schema = reader_schema
        self.builtin_id = builtin_id
        self.registry = registry

    def read(self, schema_id, body):
        """The record as fastavro returns it. Raises RegistryError when the registry fails and
        UnreadableRecord when the id cannot be resolved or the body does not decode."""
        if schema_id == self.builtin_id:
            writer = self.reader_schema
        elif self.registry is None:
            raise UnreadableRecord(f"{self.what} schema id {schema_id:#x} is not the built-in one ({self.builtin_id:#x}): its writer "
                                   "uses a schema registry; give the same registry with --registry URL "
                                   f"(or ${ENV_URL})")
        else:
            writer = self.registry.writer_schema(schema_id)
        try:
            if writer is self.reader_schema:
                return fastavro.schemaless_reader(io.BytesIO(body), writer)
            return fastavro.schemaless_reader(io.BytesIO(body), writer, self.reader_schema)
        except Exception as e:  # fastavro raises many types for a bad body or a schema mismatch
            raise UnreadableRecord(f"{self.what} with schema id {schema_id:#x} does not decode: {type(e).__name__}: {e}") from None
