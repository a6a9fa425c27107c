"""API errors of the local cluster: raised by the store and the server, answered as metav1.Status.

In: a code, a reason (``NotFound``, ``Conflict``, ``Invalid`` …), a message and optional
field causes. Out: the ``metav1.Status`` body kube-apiserver sends for the same failure.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error the API server answers with a ``metav1.Status`` of ``code`` and ``reason``."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        causes: list[dict[str, Any]] | None = None,
        retry_after: int | None = None,
        *,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.causes = causes
        self.retry_after = retry_after
        self.details = details

    def status(self) -> dict[str, Any]:
        """The ``metav1.Status`` body for this error."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        details: dict[str, Any] = dict(self.details or {})
        if self.causes:
            details["causes"] = self.causes
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        if details or self.details is not None:
            body["details"] = details
        return body

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


def _split(resource: str) -> tuple[str, str]:
    """``pytorchjobs.kubeflow.org`` → (``pytorchjobs``, ``kubeflow.org``); ``pods`` → (``pods``, "")."""
    plural, _, group = resource.partition(".")
    return plural, group


def _details(resource: str, name: str | None, kind: str | None = None) -> dict[str, Any]:
    plural, group = _split(resource)
    details: dict[str, Any] = {"kind": kind or plural}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    return details


def not_found(resource: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{resource} "{name}" not found', details=_details(resource, name))


def already_exists(resource: str, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{resource} "{name}" already exists', details=_details(resource, name)
    )


def conflict(resource: str, name: str, why: str | None = None) -> ApiError:
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {resource} "{name}": {why}',
        details=_details(resource, name),
    )


def invalid(kind: str, resource: str, name: str, causes: list[dict[str, Any]]) -> ApiError:
    """422 Invalid, the message listing every cause like kube-apiserver does (``Kind.group "name"``)."""
    parts = [f"{c['field']}: {c['message']}" for c in causes]
    summary = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    plural, group = _split(resource)
    details: dict[str, Any] = {"name": name, "kind": kind} if name else {"kind": kind}
    if group:
        details["group"] = group
    qualified = f"{kind}.{group}" if group else kind
    return ApiError(
        422, "Invalid", f'{qualified} "{name}" is invalid: {summary}', causes, details=details
    )


def field_invalid(field: str, value: object, detail: str) -> dict[str, Any]:
    """One ``FieldValueInvalid`` cause."""
    return {
        "reason": "FieldValueInvalid",
        "message": f"Invalid value: {_go_quote(value)}: {detail}",
        "field": field,
    }


def field_required(field: str, detail: str) -> dict[str, Any]:
    """One ``FieldValueRequired`` cause."""
    return {"reason": "FieldValueRequired", "message": f"Required value: {detail}", "field": field}


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(message: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", message)


def strategic_merge_unsupported() -> ApiError:
    """What kube-apiserver answers a strategic-merge patch of a custom resource (or its scale)."""
    return unsupported_media_type(
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )


def internal(message: str) -> ApiError:
    return ApiError(500, "InternalError", f"Internal error occurred: {message}")


def _go_quote(value: object) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)
