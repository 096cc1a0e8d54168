// Text helpers shared by the alert files.
{
  // `s` with every line but empty ones indented by n spaces (to nest PromQL readably).
  indent(s, n)::
    std.join('\n', [if l == '' then l else std.repeat(' ', n) + l for l in std.split(s, '\n')]),

  // A ||| block as one line: its lines trimmed and joined by one space, empty ones dropped.
  // Annotations are written as blocks here and rendered as one line, as the rule file's folded
  // (`>-`) scalars were.
  fold(s)::
    std.join(' ', [l for l in [std.stripChars(l, ' ') for l in std.split(s, '\n')] if l != '']),

  // A label as annotation text.
  safe(label):: '{{ %s }}' % label,
}
