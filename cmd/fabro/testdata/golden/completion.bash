# bash completion for fabro; load with: source <(fabro completion bash)
_fabro_subs() {
  case "$1" in
    "") echo "serve exec sessions secret token models providers sandbox completion version help" ;;
    "sessions") echo "list show resume rm checkpoints diff rewind" ;;
    "secret") echo "set list rm" ;;
    "token") echo "create list revoke" ;;
    "sandbox") echo "conformance" ;;
  esac
}
_fabro_flags() {
  case "$1" in
    "") echo "--help --version" ;;
    "serve") echo "--help --agent-idle-ttl --agent-max-replays-per-principal --agent-max-sessions-per-principal --agent-resume-on-start --anonymous-reflection --auth-tokens-file --brave-base-url --data-dir --docker-image --drain-delay --drain-timeout --grpc-addr --http-addr --http-allowed-hosts --http-cors-origins --insecure --llm-catalog-overlay --log-format --log-level --max-msg-bytes --metrics-loopback-open --nats-creds-file --nats-listen --nats-listen-tls-cert-file --nats-listen-tls-client-ca-file --nats-listen-tls-key-file --nats-nkey-file --nats-password --nats-subscriber-key-file --nats-tls-ca-file --nats-tls-cert-file --nats-tls-key-file --nats-url --nats-user --pprof --sandbox-allowed-roots --sandbox-driver --sandbox-plugin-dir --sandbox-uids --sandbox-user --tls-cert-file --tls-client-ca-file --tls-key-file --vault-accept-rollback --vault-kek-file --vault-max-secret-bytes --vault-max-versions --vault-policy-file --vault-previous-kek-file --vault-rollback-counter-file" ;;
    "exec") echo "--help --config --continue --data-dir --dir --llm-catalog-overlay --max-cost --max-turns --model --output-format --permissions --profile --reattach-timeout --resume --sandbox --sandbox-plugin-dir --server --settings --subagents --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
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
    "token create") echo "--help --config --data-dir --name --role --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "token list") echo "--help --config --data-dir --o --output --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "token revoke") echo "--help --config --data-dir --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "models") echo "--help --all --config --data-dir --o --output --provider --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "providers") echo "--help --all --config --data-dir --o --output --probe --server --timeout --tls-ca-file --tls-client-cert-file --tls-client-key-file --tls-server-name --token-file" ;;
    "sandbox") echo "--help" ;;
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
_fabro() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev= path= i w subs values
  (( COMP_CWORD > 0 )) && prev=${COMP_WORDS[COMP_CWORD-1]}
  for (( i = 1; i < COMP_CWORD; i++ )); do
    w=${COMP_WORDS[i]}
    subs=" $(_fabro_subs "$path") "
    if [[ $w != -* && $subs == *" $w "* ]]; then
      path=${path:+$path }$w
    fi
  done
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
  fi
}
complete -o default -F _fabro fabro
