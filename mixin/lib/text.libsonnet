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

  // A label that lock-info sets (holder, operation, lock_id: whoever may write a Lease or run
  // terraform against the state chooses it), as annotation text. Slack, Teams and Mattermost read
  // `<!channel>`, `<url|text>`, `[text](url)`, `&...;` and `@here` in a notification as mentions,
  // links and markup, so the text keeps only A-Z a-z 0-9 @ . _ - (anything else, control and
  // bidi characters and spaces included, becomes `_`) and breaks the mass mentions `@all`,
  // `@channel`, `@everyone`, `@group`, `@here` (`_here`). The alert's labels keep the raw value.
  safe(label)::
    '{{ %s | reReplaceAll "[^A-Za-z0-9@._-]" "_" | reReplaceAll "(?i)@(all|channel|everyone|group|here)" "_$1" }}' % label,
}
