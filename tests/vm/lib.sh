# Helpers shared by build.sh and run.sh (sourced; bash).
# They copy host files into a staging root $ST, keeping Debian's merged-/usr
# layout: /lib/x86_64-linux-gnu/libc.so.6 lands in $ST/usr/lib/x86_64-linux-gnu/.

# copy_file SRC [DEST]: copy SRC (symlinks dereferenced) to DEST inside $ST
# (default: the same path as on the host, with its directory canonicalised)
copy_file() {
  local src=$1 dest=${2:-} dir name
  if [[ -z $dest ]]; then
    dir=$(readlink -f "$(dirname "$src")"); name=$(basename "$src")
    dest=$dir/$name
  fi
  [[ -e $ST$dest ]] && return 0
  mkdir -p "$ST$(dirname "$dest")"
  cp -L "$src" "$ST$dest"
}

# is_dynamic_elf FILE: true if FILE is an ELF with an interpreter (needs libs)
is_dynamic_elf() {
  [[ $(head -c4 "$1" 2>/dev/null | od -An -c | tr -d ' ') == 177ELF ]] &&
    ldd "$1" >/dev/null 2>&1
}

# copy_libs FILE: copy every shared library ldd reports for FILE (incl. the loader)
copy_libs() {
  local lib
  # ldd lines: "libx.so.1 => /lib/.../libx.so.1 (0x..)" or "/lib64/ld-linux-x86-64.so.2 (0x..)"
  while read -r lib; do
    [[ -n $lib && -e $lib ]] && copy_file "$lib"
  done < <(ldd "$1" 2>/dev/null | awk '/=> \//{print $3} /^\t\//{print $1}')
  # the loader must also exist under the exact PT_INTERP path (/lib64/...)
  return 0
}

# copy_elf FILE...: copy file(s) to the same path plus their shared libraries
copy_elf() {
  local f
  for f in "$@"; do copy_file "$f"; copy_libs "$f"; done
}
