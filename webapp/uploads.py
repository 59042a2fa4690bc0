"""Uploads: one size limit, enforced before and while the body streams in, and keeping an accepted upload under
the data dir.

settings.PREFLAB_UPLOAD_MAX_BYTES bounds what one request can make the server write or hold. A body whose
Content-Length is over the limit (plus room for the form's other fields) is refused before any of it is read;
a multipart body is counted as Django's parser streams its files to a temporary file (or memory, under
FILE_UPLOAD_MAX_MEMORY_SIZE), and refused at the first chunk over the limit, the partial file removed. Either
refusal is an HTTP 413 naming the limit, and no view runs, so nothing is written. A body sent without its length
(Transfer-Encoding: chunked) is refused with a 411 saying to send its length: Django reads such a body as empty,
so a form would say "choose a file" and the API "no records" about a file that was sent.

What the client still sends after a refusal is not read (a 2 GiB body held a sync gunicorn worker 13-17 s while
it was): gunicorn sends the answer, then closes the connection gracefully (it stops sending and drains up to
64 KiB for 2 s before closing), so a client still sending reads the answer before the reset. Django's development
server (`manage.py serve`, the tests' live server) reads an unread body into memory in one piece when it closes
the request; there the rest is read and thrown away a chunk at a time instead.
"""

from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.core.files.move import file_move_safe
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler, StopUpload
from django.core.handlers.wsgi import LimitedStream
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse, UnreadablePostError

# The form fields besides the files (a run's launch form has about forty), and the multipart headers.
FORM_FIELDS_ALLOWANCE = 2**20
DISCARD_CHUNK = 64 * 2**10
_UNITS = ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))


def size_text(size: int) -> str:
    """'1 GiB', '1.5 MiB', '900 bytes'."""
    for unit, name in _UNITS:
        if size >= unit:
            return f"{size / unit:.1f}".removesuffix(".0") + f" {name}"
    return f"{size} bytes"


def limit_text() -> str:
    """The limit as the page and the refusal say it."""
    return size_text(settings.PREFLAB_UPLOAD_MAX_BYTES)


class UploadLimitHandler(FileUploadHandler):
    """Counts the bytes of every file in the request as they arrive; stops the upload at the first chunk over
    the limit, before a later handler writes it."""

    def __init__(self, request: HttpRequest, limit: int) -> None:
        super().__init__(request)
        self.limit = limit
        self.received = 0
        self.exceeded = False

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        self.received += len(raw_data)
        if self.received > self.limit:
            self.exceeded = True
            # connection_reset: Django would read the rest a line at a time; UploadLimitMiddleware discards it in
            # chunks instead
            raise StopUpload(connection_reset=True)
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None


class UploadLimitMiddleware:
    """Refuses a request body over PREFLAB_UPLOAD_MAX_BYTES with a 413, before any view or other middleware
    reads a form cut short (see the module's docstring)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = settings.PREFLAB_UPLOAD_MAX_BYTES
        if _sent_in_chunks(request):
            return _refused_chunked(request)
        if declared_length(request) > limit + FORM_FIELDS_ALLOWANCE:
            return _refused(request, limit)
        if request.method == "POST" and request.content_type == "multipart/form-data":
            counter = UploadLimitHandler(request, limit)
            request.upload_handlers.insert(0, counter)
            try:
                request.FILES  # noqa: B018 (parsed here, so that a refusal comes before anything acts on the form)
            except UnreadablePostError:
                _discard_partial_files(request)
                return HttpResponse("The upload was cut off before its end.", status=400,
                                    content_type="text/plain; charset=utf-8")
            if counter.exceeded:
                _discard_partial_files(request)
                return _refused(request, limit)
        return self.get_response(request)


def declared_length(request: HttpRequest) -> int:
    """The body's Content-Length; 0 when there is none (or it is not a number, which the servers refuse)."""
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


def _sent_in_chunks(request: HttpRequest) -> bool:
    return "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()


def _refused_chunked(request: HttpRequest) -> HttpResponse:
    answer = refusal(request, 411, "This server needs the length of a request's body up front (a Content-Length "
                                   "header); it does not take a body sent in chunks (Transfer-Encoding: chunked). "
                                   "Send the file with its length. Nothing was stored.")
    # Sent without a length of its own, so that Django's development server closes the connection after it instead
    # of reading the chunks left there as the client's next request (gunicorn closes it after every answer).
    return StreamingHttpResponse([answer.content], status=answer.status_code, content_type=answer["Content-Type"])


def _refused(request: HttpRequest, limit: int) -> HttpResponse:
    return refusal(request, 413, f"The upload is larger than this server accepts: at most {size_text(limit)} "
                                 "(PREFLAB_UPLOAD_MAX_BYTES). Nothing was stored.")


def refusal(request: HttpRequest, status: int, message: str) -> HttpResponse:
    """An answer to a request whose body is left unread: plain text, or the API's {"detail": ...}."""
    body_left_unread(request)
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": message}, status=status)
    return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")


def body_left_unread(request: HttpRequest) -> None:
    """Call before answering a request without reading the rest of its body (see the module's docstring): under
    Django's development server the rest is read here, a chunk at a time; under gunicorn nothing is."""
    if not isinstance(request.environ.get("wsgi.input"), LimitedStream):
        return
    try:
        while request.read(DISCARD_CHUNK):
            pass
    except (OSError, UnreadablePostError):
        pass  # the client went away: nothing left to read


def _discard_partial_files(request: HttpRequest) -> None:
    """The file being written when the upload stopped is no longer referenced by the parser: remove it now
    rather than when it is garbage-collected."""
    for handler in request.upload_handlers:
        if hasattr(handler, "file"):
            handler.upload_interrupted()


def upload_keep(upload: UploadedFile, path: Path) -> None:
    """Put an accepted upload at `path`: a rename of its temporary file where it has one, else a copy a chunk at a
    time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if hasattr(upload, "temporary_file_path"):
        file_move_safe(upload.temporary_file_path(), str(path))
        return
    with path.open("wb") as kept:
        for chunk in upload.chunks():
            kept.write(chunk)
