# bash completion for objfs: commands, flags, -o option names and their
# values, mount points and paths. `make install` puts it where
# bash-completion looks (configure --with-bash-completion-dir); by hand:
#   . contrib/completion/objfs.bash
# The option list is the option table's (src/options.c): tests/check_options.c
# fails when the two differ. A name ending in = takes a value.

_objfs_options="chunk_size= cache_size= prefetch_max= max_connections= threads=
engine_threads= stats attr_timeout= entry_timeout= negative_timeout= list_ttl=
retries= timeout= allow_other nonempty default_permissions uid= gid= umask= ca_file=
insecure log_level= log_file= side= direct_recv= direct_io ring_slots=
ring_slot_size= fill_threads= side_ring_budget= cache_dir= cache_dir_size=
metrics= proxy= max_dir_bytes= max_dir_entries= max_list_pages= list_timeout=
allow_redirects= http_version= debug_dumpable endpoint= region= profile=
path_style virtual_host no_sign credentials_file= config_file= rw ro defaults
auto noauto user users nouser _netdev nofail atime relatime norelatime
strictatime nostrictatime lazytime nolazytime owner group silent loud helper
nosymfollow dev nodev suid nosuid exec noexec noatime nodiratime sync async
dirsync"

# COMPREPLY: compgen's words, one a line (names with blanks kept whole).
_objfs_reply() {
	mapfile -t COMPREPLY < <(compgen "$@")
}

# Completes the -o list word $1 (options so far, comma-separated).
_objfs_o() {
	local cur=$1 seg head name wb
	seg=${cur##*,}
	head=${cur%"$seg"}
	case $seg in
	*=*)
		name=${seg%%=*}
		case $name in
		side | direct_recv) _objfs_reply -W "on off" -- "${seg#*=}" ;;
		log_level) _objfs_reply -W "error warn info debug" -- "${seg#*=}" ;;
		allow_redirects) _objfs_reply -W "origin any none" -- "${seg#*=}" ;;
		http_version) _objfs_reply -W "1.1 2" -- "${seg#*=}" ;;
		cache_dir) _objfs_reply -d -- "${seg#*=}" ;;
		ca_file | log_file | credentials_file | config_file)
			_objfs_reply -f -- "${seg#*=}" ;;
		*) return ;;
		esac
		COMPREPLY=("${COMPREPLY[@]/#/$head$name=}")
		;;
	*)
		_objfs_reply -W "$_objfs_options" -- "$seg"
		COMPREPLY=("${COMPREPLY[@]/#/$head}")
		[[ ${COMPREPLY[*]} == *= ]] && compopt -o nospace 2>/dev/null
		;;
	esac
	# bash replaces only what follows the last = or : of the word
	wb=${cur%"${cur##*[=:]}"}
	[ -n "$wb" ] && COMPREPLY=("${COMPREPLY[@]#"$wb"}")
}

_objfs() {
	local line=${COMP_LINE:0:COMP_POINT} cur prev cmd
	local -a w
	read -r -a w <<<"$line"
	if [[ $line == *[[:space:]] ]]; then
		cur=
		prev=${w[${#w[@]} - 1]}
	else
		cur=${w[${#w[@]} - 1]}
		prev=${w[${#w[@]} - 2]:-}
	fi
	cmd=${w[1]:-}
	[ "${#w[@]}" -le 1 ] || { [ "${#w[@]}" -eq 2 ] && [ -n "$cur" ]; } && cmd=
	COMPREPLY=()
	case $cmd in
	stats)
		case $prev in
		-i | -n) return ;;
		esac
		if [[ $cur == -* ]]; then
			_objfs_reply -W "-i -n -h" -- "$cur"
		else
			_objfs_reply -d -- "$cur"
		fi
		return
		;;
	warmup)
		[ "$prev" = -p ] && return
		if [[ $cur == -* ]]; then
			_objfs_reply -W "-p -q -h" -- "$cur"
		else
			_objfs_reply -f -- "$cur"
		fi
		return
		;;
	esac
	if [ "$prev" = -o ]; then
		_objfs_o "$cur"
	elif [[ $cur == -o?* ]]; then
		_objfs_o "${cur#-o}"
		[ -n "${cur##*[=:]*}" ] && COMPREPLY=("${COMPREPLY[@]/#/-o}")
	elif [[ $cur == -* ]]; then
		_objfs_reply -W "-f -d -o -h --help -V --version
			--show-credential-source" -- "$cur"
	elif [ "${#w[@]}" -le 2 ] && [ -z "$cmd" ] && [[ $cur != */* ]]; then
		_objfs_reply -W "stats warmup http:// https:// s3://" -- "$cur"
		compopt -o nospace 2>/dev/null
	else
		_objfs_reply -d -- "$cur"
	fi
}
complete -F _objfs objfs
