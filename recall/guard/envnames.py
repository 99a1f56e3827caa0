"""Environment variable names that change how programs run (loaders, shells, interpreters, the
programs tools start, debug logging, trust, proxies, config paths): no secret may set one, and no
setup step exports one inline; `run_changing` says which, and why."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """One reason a name changes how programs run, and the names it covers."""

    why: str
    names: frozenset
    prefixes: tuple = ()
    suffixes: tuple = ()
    empty_is_harmless: bool = False   # `export NAME=` starts nothing (AWS_PAGER= turns the pager off)


KINDS = (
    Kind("makes programs load or run other code", frozenset({
        "ENV", "IFS", "PS4", "SHELLOPTS", "PROMPT_COMMAND", "CDPATH", "GLOBIGNORE", "EXECIGNORE",
        "ZDOTDIR", "GCONV_PATH", "GLIBC_TUNABLES", "NODE_OPTIONS", "NODE_PATH", "RUBYOPT", "RUBYLIB",
        "PERLLIB", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "SHELL", "DOCKER_CONFIG"}),
        ("LD_", "DYLD_", "PYTHON", "PERL5", "BASH", "MALLOC_", "CLOUDSDK_PYTHON")),
    # a tool runs what these name (kubectl edit, git commit, less, man, aws, gh, psql, xdg-open)
    Kind("names a program that tools start (a pager, editor or browser)",
         frozenset({"VISUAL", "FCEDIT", "MANOPT"}), ("LESS",), ("PAGER", "EDITOR", "BROWSER"),
         empty_is_harmless=True),
    # debug output (gcloud, terraform, node, grpc, AWS_DEBUG …) holds request headers: the credential
    Kind("turns on logging that writes requests and their credentials out",
         frozenset({"SSLKEYLOGFILE", "GRPC_TRACE"}), ("CLOUDSDK_CORE_LOG_", "TF_LOG"),
         ("DEBUG", "VERBOSE", "VERBOSITY", "LOG_LEVEL", "LOGLEVEL")),
    Kind("changes trust, proxies, endpoints or where configuration is read", frozenset({
        "PATH", "HOME", "TMPDIR", "REQUESTS_CA_BUNDLE", "KUBECONFIG", "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE", "AWS_CA_BUNDLE", "AWS_ENDPOINT_URL", "AWS_DATA_PATH",
        "AZURE_CONFIG_DIR", "CLOUDSDK_CONFIG", "SSH_AUTH_SOCK", "SSH_ASKPASS", "SUDO_ASKPASS",
        "GNUPGHOME", "LOCPATH", "NLSPATH", "HOSTALIASES", "RES_OPTIONS", "LOCALDOMAIN", "HTTP_PROXY",
        "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "OPENSSL_CONF", "TZDIR", "TERMINFO", "TERMINFO_DIRS",
        "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "DOCKER_HOST", "NODE_TLS_REJECT_UNAUTHORIZED",
        "AZURE_CLI_DISABLE_CONNECTION_VERIFICATION", "ADAL_PYTHON_SSL_NO_VERIFY",
        "CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE", "NODE_EXTRA_CA_CERTS"}),
        ("SSL_CERT_", "GIT_", "RECALL_", "CURL_", "AWS_ENDPOINT_URL_", "KUBECTL_", "KUBERNETES_",
         "CLOUDSDK_AUTH_", "CLOUDSDK_API_ENDPOINT_OVERRIDES_", "CLOUDSDK_PROXY_", "AWS_CONTAINER_",
         "AWS_EC2_METADATA_")),
)


def run_changing(name: str):
    """The Kind of change setting `name` makes to how programs run (None: an ordinary name)."""
    return next((k for k in KINDS if name in k.names or name.startswith(k.prefixes)
                 or name.endswith(k.suffixes)), None)
