"""The Kafka settings of an authenticated bus: SASL passwords from a mounted Secret's file, client
certificates for mutual TLS, and a one-line error naming the variable for each thing kto cannot use."""

from __future__ import annotations

import pathlib
import ssl

import pytest

from realparts import certifying
from shared.bus import settings
from shared.bus.settings import KafkaSettings, SettingsError


@pytest.fixture
def issued(tmp_path: pathlib.Path) -> tuple[pathlib.Path, certifying.Issued]:
    """A CA's certificate file and a client certificate it signed, ``CN=kto-watcher``."""
    authority = certifying.Authority(tmp_path / "ca", "test CA")
    return authority.cert, authority.issue("kto-watcher")


def scram(password_file: pathlib.Path) -> dict[str, str]:
    return {"KTO_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KTO_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "KTO_KAFKA_SASL_USERNAME": "kto-watcher", "KTO_KAFKA_SASL_PASSWORD_FILE": str(password_file)}


@pytest.mark.parametrize(("content", "password"), [
    pytest.param("s3cret", "s3cret", id="as-a-secret-holds-it"),
    pytest.param("s3cret\n", "s3cret", id="one-newline-dropped"),
    pytest.param(" s3 cret \n\n", " s3 cret \n", id="only-one-newline-dropped"),
])
def test_the_sasl_password_comes_from_its_file(tmp_path: pathlib.Path, content: str, password: str) -> None:
    path = tmp_path / "password"
    path.write_text(content)
    s = KafkaSettings.from_env(scram(path))
    assert settings.client_options(s)["sasl_plain_password"] == password
    assert "s3" not in repr(s)


def test_a_rotated_password_file_is_read_by_the_next_client(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "password"
    path.write_text("first")
    s = KafkaSettings.from_env(scram(path))
    path.write_text("second")
    assert settings.client_options(s)["sasl_plain_password"] == "second"


def test_a_child_process_gets_the_password_file_not_the_password(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "password"
    path.write_text("s3cret")
    s = KafkaSettings.from_env(scram(path))
    env = s.to_env()
    assert env["KTO_KAFKA_SASL_PASSWORD_FILE"] == str(path) and "KTO_KAFKA_SASL_PASSWORD" not in env
    assert "s3cret" not in "".join(env.values())
    assert KafkaSettings.from_env(env) == s


def test_mutual_tls_settings_make_a_context_that_presents_the_client_certificate(
    issued: tuple[pathlib.Path, certifying.Issued],
) -> None:
    ca, client = issued
    s = KafkaSettings.from_env({"KTO_KAFKA_SECURITY_PROTOCOL": "SSL", "KTO_KAFKA_SSL_CAFILE": str(ca),
                                "KTO_KAFKA_SSL_CERTFILE": str(client.cert), "KTO_KAFKA_SSL_KEYFILE": str(client.key)})
    context = settings.client_options(s)["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "test CA"),),)]


def bad(tmp_path: pathlib.Path, issued: tuple[pathlib.Path, certifying.Issued], case: str) -> dict[str, str]:
    ca, client = issued
    empty = tmp_path / "empty"
    empty.write_text("\n")
    not_pem = tmp_path / "not-pem"
    not_pem.write_text("hello")
    other = certifying.Authority(tmp_path / "other", "other CA").issue("kto-status")
    mtls = {"KTO_KAFKA_SECURITY_PROTOCOL": "SSL", "KTO_KAFKA_SSL_CAFILE": str(ca),
            "KTO_KAFKA_SSL_CERTFILE": str(client.cert), "KTO_KAFKA_SSL_KEYFILE": str(client.key)}
    return {
        "file-missing": scram(tmp_path / "nowhere"),
        "file-empty": scram(empty),
        "both": {**scram(empty), "KTO_KAFKA_SASL_PASSWORD": "pw"},
        "neither": {**scram(empty), "KTO_KAFKA_SASL_PASSWORD_FILE": ""},
        "sasl-without-protocol": {"KTO_KAFKA_SASL_USERNAME": "kto-watcher", "KTO_KAFKA_SASL_PASSWORD": "pw"},
        "certificate-without-protocol": {k: v for k, v in mtls.items() if k != "KTO_KAFKA_SECURITY_PROTOCOL"},
        "key-of-another-certificate": {**mtls, "KTO_KAFKA_SSL_KEYFILE": str(other.key)},
        "ca-not-pem": {**mtls, "KTO_KAFKA_SSL_CAFILE": str(not_pem)},
        "compression": {"KTO_KAFKA_COMPRESSION": "brotli"},
    }[case]


@pytest.mark.parametrize(("case", "said"), [
    pytest.param("file-missing", "KTO_KAFKA_SASL_PASSWORD_FILE: ", id="password-file-missing"),
    pytest.param("file-empty", "KTO_KAFKA_SASL_PASSWORD_FILE: ", id="password-file-empty"),
    pytest.param("both", "KTO_KAFKA_SASL_PASSWORD_FILE: set it or KTO_KAFKA_SASL_PASSWORD, not both",
                 id="password-and-file"),
    pytest.param("neither", "KTO_KAFKA_SASL_PASSWORD: required with SASL_SSL", id="no-password"),
    pytest.param("sasl-without-protocol", "KTO_KAFKA_SASL_USERNAME: is used only with SASL_PLAINTEXT or SASL_SSL, "
                 "and KTO_KAFKA_SECURITY_PROTOCOL is PLAINTEXT", id="sasl-without-protocol"),
    pytest.param("certificate-without-protocol", "KTO_KAFKA_SSL_CAFILE: is used only with SSL or SASL_SSL",
                 id="certificate-without-protocol"),
    pytest.param("key-of-another-certificate", "KTO_KAFKA_SSL_KEYFILE: ", id="key-of-another-certificate"),
    pytest.param("ca-not-pem", "KTO_KAFKA_SSL_CAFILE: ", id="ca-not-pem"),
    pytest.param("compression", "KTO_KAFKA_COMPRESSION: must be one of zstd, lz4, gzip, none", id="compression"),
])
def test_what_kto_cannot_use_is_one_line_naming_the_variable(
    tmp_path: pathlib.Path, issued: tuple[pathlib.Path, certifying.Issued], case: str, said: str,
) -> None:
    with pytest.raises(SettingsError) as caught:
        KafkaSettings.from_env(bad(tmp_path, issued, case))
    assert str(caught.value).startswith(said) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("asked", "on_kafka", "on_tansu"), [
    pytest.param(None, 500, settings.TANSU_FETCH_MAX_WAIT_MS, id="unset-waits-long-on-kafka-short-on-tansu"),
    pytest.param(250, 250, 250, id="set-is-kept-on-both"),
])
def test_a_fetch_waits_long_on_kafka_which_answers_as_records_arrive_and_short_on_tansu(
    asked: int | None, on_kafka: int, on_tansu: int,
) -> None:
    chosen = KafkaSettings() if asked is None else KafkaSettings(fetch_max_wait_ms=asked)
    assert (chosen.fetch_max_wait_ms, settings.for_tansu(chosen).fetch_max_wait_ms) == (on_kafka, on_tansu)
