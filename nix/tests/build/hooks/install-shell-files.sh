# shellcheck shell=bash
#
# Stand-in for nixpkgs' installShellFiles: installShellCompletion (--cmd
# NAME with --bash/--zsh/--fish FILE, FILE possibly a process substitution)
# and installManPage, into the places nixpkgs' versions use.

# shellcheck disable=SC2154 # $out is the derivation's.

installShellCompletion() {
    local cmd="" shell file dest
    while (($#)); do
        case $1 in
        --cmd)
            cmd=$2
            shift 2
            ;;
        --bash | --zsh | --fish)
            shell=${1#--} file=$2
            shift 2
            [[ -n $cmd ]] || {
                echo "installShellCompletion: --$shell needs --cmd" >&2
                return 1
            }
            case $shell in
            bash) dest=$out/share/bash-completion/completions/$cmd.bash ;;
            zsh) dest=$out/share/zsh/site-functions/_$cmd ;;
            fish) dest=$out/share/fish/vendor_completions.d/$cmd.fish ;;
            esac
            mkdir -p "${dest%/*}"
            cat "$file" >"$dest"
            ;;
        *)
            echo "installShellCompletion (stand-in): unsupported argument $1" >&2
            return 1
            ;;
        esac
    done
}

installManPage() {
    local page section
    for page in "$@"; do
        section=${page##*.}
        mkdir -p "$out/share/man/man$section"
        cp "$page" "$out/share/man/man$section/"
    done
}
