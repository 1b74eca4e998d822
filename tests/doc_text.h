/*
 * doc_text: what the unit tests read of the documentation to hold it to the
 * option table (src/options.c, tests/check_options.c) and the counter table
 * (src/counters.c, tests/check_stats.c): a file of the source tree, a
 * section of the man page, the names an item of it is about, the rows and
 * cells of a README table. Just enough groff and Markdown for objfs's own
 * pages; every function allocates what it returns (doc_list_free).
 */
#ifndef OBJFS_TEST_DOC_TEXT_H
#define OBJFS_TEST_DOC_TEXT_H

#include <stddef.h>

struct doc_list {
	char **v;
	size_t n;
};

void doc_list_free(struct doc_list *l);
/* Appends a copy of @s to @l. */
void doc_list_add(struct doc_list *l, const char *s);
/* Whether @l holds @s. */
int doc_list_has(const struct doc_list *l, const char *s);

/* The file @rel of the source tree ($srcdir, else OBJFS_SRCDIR), NUL-terminated; NULL if unreadable. */
char *doc_read(const char *rel);

/* The text of the man page section ".SH @name" up to the next .SH; NULL if none. */
char *doc_man_section(const char *man, const char *name);

/* The head lines of the items (the line after each .TP) of @section. */
void doc_man_heads(const char *section, struct doc_list *out);

/*
 * The option-like names set in bold in @text (a head line, or a whole
 * section): from the bold arguments of .B, .BI and .BR lines and from
 * \fB...\fR spans, split at blanks, commas, bars and slashes, each taken up
 * to its '='; flags (-x), "..." and patterns (x-systemd.*) left out.
 */
void doc_bold_names(const char *text, struct doc_list *out);

/* The body rows of every Markdown table of @md whose header line starts with @header. */
void doc_md_rows(const char *md, const char *header, struct doc_list *out);

/* Cell @i (from 0) of the table row @row, trimmed, "\|" as "|"; "" if none. */
void doc_md_cell(const char *row, int i, char *buf, size_t cap);

/* The names in `code` spans of @cell, each up to its '=' ("..." and patterns left out). */
void doc_md_names(const char *cell, struct doc_list *out);

#endif
