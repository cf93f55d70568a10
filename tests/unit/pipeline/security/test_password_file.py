"""The users file: Jetty's property-file form, every stored password form, constant-time checks, reloading."""

from __future__ import annotations

import hashlib
import logging
import os
import time
from pathlib import Path

import pytest

from pipeline.security import password_file
from pipeline.security.password_file import UsersFile, hash_password, parse_users, verify_password


def test_lines_name_a_user_a_password_and_roles() -> None:
    users = parse_users("# comment\n! another\n\nalice: secret, read , write\nbob=MD5:abc,admin\ncarol: pw\n")
    assert sorted(users) == ["alice", "bob", "carol"]
    assert users["alice"].credential == "secret" and users["alice"].roles == {"read", "write"}
    assert users["bob"].roles == {"admin"} and users["bob"].scheme == "MD5"
    assert users["carol"].roles == frozenset() and users["carol"].scheme == "PLAIN"


@pytest.mark.parametrize("text, wrong", [("alice\n", "line 1"), ("a: x\n: pw\n", "line 2"), ("a: x\na: y\n", "twice"),
                                         ("a: ,role\n", "password")])
def test_malformed_lines_are_named(text: str, wrong: str) -> None:
    with pytest.raises(ValueError, match=wrong.replace("line ", "")):
        parse_users(text)


def test_the_repr_of_a_user_never_shows_the_credential() -> None:
    assert "secret" not in repr(parse_users("alice: secret,read")["alice"])


@pytest.mark.parametrize("scheme", ["PBKDF2", "SCRYPT"])
def test_our_hashes_verify_the_password_only(scheme: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(password_file, "PBKDF2_ITERATIONS", 1000)
    stored = hash_password("s3cret", scheme)
    assert stored.startswith(scheme + ":") and "s3cret" not in stored
    assert verify_password("s3cret", stored)
    assert not verify_password("s3cre", stored) and not verify_password("", stored)
    assert hash_password("s3cret", scheme) != stored  # salted


def test_jettys_forms_and_plain_text_verify() -> None:
    assert verify_password("pw", "MD5:" + hashlib.md5(b"pw").hexdigest())
    assert not verify_password("px", "MD5:" + hashlib.md5(b"pw").hexdigest())
    assert verify_password("pw", "pw") and not verify_password("pw ", "pw")
    assert verify_password("a:b", "a:b")  # a plain password holding a colon is no scheme
    assert not verify_password("pw", "PBKDF2:garbage")
    # Jetty's documented obfuscation of "password".
    assert verify_password("password", "OBF:1v2j1uum1xtv1zej1zer1xtn1uvk1v1v")
    assert not verify_password("passwore", "OBF:1v2j1uum1xtv1zej1zer1xtn1uvk1v1v")
    assert not verify_password("x", "OBF:zz")


def test_crypt_form_verifies_where_python_has_crypt() -> None:
    crypt = pytest.importorskip("crypt")
    stored = "CRYPT:" + crypt.crypt("pw", "ab")
    assert verify_password("pw", stored) and not verify_password("px", stored)


def test_comparisons_are_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[object, object]] = []
    real = password_file.hmac.compare_digest
    monkeypatch.setattr(password_file.hmac, "compare_digest", lambda a, b: compared.append((a, b)) or real(a, b))
    for stored in ("pw", "MD5:" + hashlib.md5(b"pw").hexdigest(), hash_password("pw", "SCRYPT")):
        compared.clear()
        verify_password("nope", stored)
        assert len(compared) == 1


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_a_users_file_checks_logins_and_an_unknown_user_costs_a_hash(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(password_file, "PBKDF2_ITERATIONS", 1000)
    users = UsersFile(write(tmp_path / "users", f"alice: {hash_password('pw')},read\n"))
    assert users.check("alice", "pw").roles == {"read"}  # type: ignore[union-attr]
    assert users.check("alice", "pw") is not None  # remembered
    assert users.check("alice", "px") is None
    verified: list[str] = []
    real = password_file.verify_password
    monkeypatch.setattr(password_file, "verify_password", lambda p, c: verified.append(c) or real(p, c))
    assert users.check("mallory", "pw") is None  # alice's password, but not alice
    assert verified == [users.users()["alice"].credential]  # a known user's stored form: the same cost


def test_plain_passwords_and_open_permissions_are_warned_about(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "users"
    path.write_text("alice: topsecret,read\n")
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING):
        UsersFile(path)
    assert "plain text" in caplog.text and "alice" in caplog.text and "chmod 600" in caplog.text
    assert "topsecret" not in caplog.text


def test_the_file_is_read_again_when_it_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(password_file, "RELOAD_CHECK_S", 0.0)
    path = write(tmp_path / "users", "alice: one,read\n")
    users = UsersFile(path)
    assert users.check("alice", "one") is not None
    write(path, "alice: two,admin\nbob: three\n")
    os.utime(path, (time.time() + 5, time.time() + 5))
    assert users.check("alice", "one") is None
    assert users.check("alice", "two").roles == {"admin"}  # type: ignore[union-attr]
    write(path, "broken\n")
    os.utime(path, (time.time() + 10, time.time() + 10))
    assert users.check("bob", "three") is not None  # a broken file keeps the users read before


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read the users file"):
        UsersFile(tmp_path / "absent")


def test_the_command_hashes_a_password_from_stdin(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(password_file, "PBKDF2_ITERATIONS", 1000)
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("pw\n"))
    assert password_file.main([]) == 0
    assert verify_password("pw", capsys.readouterr().out.strip())
