# bash completion for fabro; load with: source <(fabro completion bash)
_fabro_subs() {
  case "$1" in
    "") echo "serve exec acp sessions secret token models providers sandbox completion version help" ;;
    "sessions") echo "list show resume rm checkpoints diff rewind" ;;
    "secret") echo "set list rm" ;;
    "token") echo "create list revoke" ;;
    "sandbox") echo "ps logs shell pause resume conformance" ;;
  esac
}
_fabro_flags() {
  case "$1" in
    "") echo "--help --version" ;;
    "serve") echo "--help --agent-closed-retention --agent-idle-ttl --agent-max-replays-per-principal --agent-max-sessions-per-principal --agent-resume-on-start --anonymous-reflection --auth-tokens-file --brave-base-url --data-dir --docker-image --drain-delay --drain-timeout --grpc-addr --http-addr --http-allowed-hosts --http-cors-origins --insecure --llm-catalog-overlay --llm-principal-limits --log-format --log-level --max-msg-bytes --metrics-loopback-open --nats-creds-file --nats-listen --nats-listen-tls-cert-file --nats-listen-tls-client-ca-file --nats-listen-tls-key-file --nats-nkey-file --nats-password --nats-subscriber-key-file --nats-tls-ca-file --nats-tls-cert-file --nats-tls-key-file --nats-url --nats-user --pprof --sandbox-allowed-roots --sandbox-disk-default --sandbox-disk-max --sandbox-driver --sandbox-plugin-dir --sandbox-uids --sandbox-user --tls-cert-file --tls-client-ca-file --tls-key-file --vault-accept-rollback --vault-kek-file --vault-max-secret-bytes --vault-max-versions --vault-nats-creds --vault-nats-replicas --vault-nats-url --vault-policy-file --vault-previous-kek-file --vault-rollback-counter-file --vault-store" ;;
    "exec") echo "--help --config --continue --data-dir --dir --llm-catalog-overlay --max-cost --max-turns --model --output-format --permissions --profile --reattach-timeout --resume --sandbox --sandbox-plugin-dir --server --settings --subagents --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "acp") echo "--help --config --data-dir --dir --llm-catalog-overlay --max-turns --model --permissions --sandbox --sandbox-plugin-dir --server --settings --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "sessions") echo "--help" ;;
    "sessions list") echo "--help --config --data-dir --limit --o --output --server --state --subagents --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "sessions show") echo "--help --config --data-dir --o --output --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "sessions resume") echo "--help --config --continue --data-dir --dir --model --reattach-timeout --sandbox --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "sessions rm") echo "--help --config --data-dir --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "sessions checkpoints") echo "--help --config --data-dir --o --output --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "sessions diff") echo "--help --config --data-dir --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file --turn" ;;
    "sessions rewind") echo "--help --config --conversation --data-dir --force --o --output --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --to --token-file" ;;
    "secret") echo "--help" ;;
    "secret set") echo "--help --config --data-dir --expected-version --llm-catalog-overlay --no-probe --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "secret list") echo "--help --config --data-dir --o --output --prefix --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "secret rm") echo "--help --config --data-dir --expected-version --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file --version" ;;
    "token") echo "--help" ;;
    "token create") echo "--help --budget --budget-soft --budget-warn --config --data-dir --max-concurrent --models --name --role --rpm --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file --tpm" ;;
    "token list") echo "--help --config --data-dir --o --output --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "token revoke") echo "--help --config --data-dir --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "models") echo "--help --all --config --data-dir --o --output --provider --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "providers") echo "--help --all --config --data-dir --o --output --probe --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "sandbox") echo "--help" ;;
    "sandbox ps") echo "--help --config --data-dir --o --output --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "sandbox logs") echo "--help --config --data-dir --f --reattach-timeout --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "sandbox shell") echo "--help --command --config --data-dir --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "sandbox pause") echo "--help --config --data-dir --o --output --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "sandbox resume") echo "--help --config --data-dir --o --output --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "sandbox conformance") echo "--help --plugin-env --run --v" ;;
    "completion") echo "--help" ;;
    "version") echo "--help" ;;
    "help") echo "--help" ;;
  esac
}
_fabro_values() {
  case "$1" in
    --permissions|-permissions) echo "read-only read-write full" ;;
    --role|-role) echo "user admin" ;;
    --sandbox|-sandbox) echo "local docker" ;;
    *) return 1 ;;
  esac
}
# The kind of word only the server knows that a flag's value or a
# command's argument is: fabro __complete KIND prints them.
_fabro_flag_kind() {
  case "$1" in
    --model|-model) echo models ;;
    --sandbox|-sandbox) echo drivers ;;
    *) return 1 ;;
  esac
}
_fabro_arg_kind() {
  case "$1" in
    "sessions resume") echo sessions ;;
    "sessions rm") echo sessions ;;
    "sessions show") echo sessions ;;
    *) return 1 ;;
  esac
}
# The server's words of kind $1, from the --server typed on the line if
# any; nothing when it does not answer within a second.
_fabro_server_words() {
  local i server=()
  for (( i = 1; i < COMP_CWORD; i++ )); do
    case ${COMP_WORDS[i]} in
      --server|-server) server=(--server "${COMP_WORDS[i+1]}") ;;
    esac
  done
  "${COMP_WORDS[0]}" __complete "$1" "${server[@]}" 2>/dev/null
}
_fabro() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev= path= i w subs values kind
  (( COMP_CWORD > 0 )) && prev=${COMP_WORDS[COMP_CWORD-1]}
  for (( i = 1; i < COMP_CWORD; i++ )); do
    w=${COMP_WORDS[i]}
    subs=" $(_fabro_subs "$path") "
    if [[ $w != -* && $subs == *" $w "* ]]; then
      path=${path:+$path }$w
    fi
  done
  if kind=$(_fabro_flag_kind "$prev"); then
    values=$(_fabro_server_words "$kind")
    [[ -n $values ]] || values=$(_fabro_values "$prev")
    COMPREPLY=($(compgen -W "$values" -- "$cur"))
    return
  fi
  if values=$(_fabro_values "$prev"); then
    COMPREPLY=($(compgen -W "$values" -- "$cur"))
    return
  fi
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$(_fabro_flags "$path")" -- "$cur"))
    return
  fi
  subs=$(_fabro_subs "$path")
  if [[ -n $subs ]]; then
    COMPREPLY=($(compgen -W "$subs" -- "$cur"))
  elif kind=$(_fabro_arg_kind "$path"); then
    COMPREPLY=($(compgen -W "$(_fabro_server_words "$kind")" -- "$cur"))
  fi
}
complete -o default -F _fabro fabro
