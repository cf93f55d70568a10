"""The Confluent Schema Registry's errors: an HTTP status and an `error_code` in a JSON body."""

from __future__ import annotations


class RegistryError(Exception):
    """An error the API reports as `{"error_code": code, "message": message}` with HTTP `status`."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> dict[str, object]:
        return {"error_code": self.code, "message": self.message}


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(subject: str, version: object) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found.")


def schema_not_found(detail: str = "Schema not found") -> RegistryError:
    return RegistryError(404, 40403, detail)


def subject_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, 40404, f"Subject '{subject}' was soft deleted. Set permanent=true to delete permanently")


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, 40405, f"Subject '{subject}' was not deleted first before being permanently deleted")


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(404, 40406, f"Subject '{subject}' Version {version} was soft deleted. "
                                     "Set permanent=true to delete permanently")


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(404, 40407, f"Subject '{subject}' Version {version} was not deleted first "
                                     "before being permanently deleted")


def incompatible(messages: list[str]) -> RegistryError:
    return RegistryError(409, 409, "Schema being registered is incompatible with an earlier schema for subject; "
                         + "; ".join(messages))


def invalid_schema(detail: str) -> RegistryError:
    return RegistryError(422, 42201, f"Invalid schema: {detail}")


def invalid_version(version: object) -> RegistryError:
    return RegistryError(422, 42202, f"The specified version '{version}' is not a valid version id. Allowed "
                         "values are between [1, 2^31-1] and the string \"latest\"")


def invalid_compatibility_level(level: object) -> RegistryError:
    return RegistryError(422, 42203, f"Invalid compatibility level. Valid values are none, backward, forward, "
                         f"full, backward_transitive, forward_transitive, and full_transitive: {level}")


def invalid_mode(mode: object) -> RegistryError:
    return RegistryError(422, 42204, f"Invalid mode. Valid values are READWRITE and READONLY: {mode}")


def operation_not_permitted(detail: str) -> RegistryError:
    return RegistryError(422, 42205, detail)


def store_error(detail: str) -> RegistryError:
    return RegistryError(500, 50001, f"Error in the backend data store: {detail}")


def store_timeout(detail: str) -> RegistryError:
    return RegistryError(500, 50002, f"Operation timed out: {detail}")


def subject_level_config_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")


def bad_request(detail: str) -> RegistryError:
    return RegistryError(400, 400, detail)


def reference_exists(subject: str, version: int) -> RegistryError:
    return RegistryError(422, 42206, f"One or more references exist to the schema "
                                     f"{{subject={subject},version={version}}}")
