/* RFC3339 timestamps for temporal thresholds:
 * YYYY-MM-DD[Tt]HH:MM:SS[.fraction]([Zz]|(+|-)hh:mm), ranges checked,
 * leap second :60 accepted (it counts as the next minute's :00). */
#include "matcher_internal.h"


static int
digits(const char *s, int n, int *out)
{
    int v = 0, i;

    for (i = 0; i < n; i++) {
        if ((unsigned)(s[i] - '0') >= 10) {
            return -1;
        }
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}


static int
days_in_month(int year, int month)
{
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;

    return month == 2 && leap ? 29 : days[month - 1];
}


/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant). */
static int64_t
days_from_civil(int64_t y, int m, int d)
{
    int64_t era, yoe, doy, doe;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;
    doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}


/* Parse ".fraction" at s into nanoseconds; returns bytes consumed (0 = none). */
static size_t
fraction(const char *s, size_t len, int32_t *nsec, int *beyond)
{
    size_t i = 1;
    int32_t ns = 0, scale = 100000000;

    if (len < 2 || s[0] != '.' || (unsigned)(s[1] - '0') >= 10) {
        return 0;
    }
    for (; i < len && (unsigned)(s[i] - '0') < 10; i++) {
        if (scale > 0) {
            ns += (s[i] - '0') * scale;
            scale /= 10;
        } else if (s[i] != '0') {
            *beyond = 1;
        }
    }
    *nsec = ns;
    return i;
}


/* The zone suffix at s: returns its offset east of UTC in seconds via *off. */
static int
zone(const char *s, size_t len, int *off)
{
    int hh, mm;

    if (len == 1 && (s[0] == 'Z' || s[0] == 'z')) {
        *off = 0;
        return 0;
    }
    if (len != 6 || (s[0] != '+' && s[0] != '-') || s[3] != ':' || digits(s + 1, 2, &hh) < 0
        || digits(s + 4, 2, &mm) < 0 || hh > 23 || mm > 59) {
        return -1;
    }
    *off = (s[0] == '-' ? -1 : 1) * (hh * 3600 + mm * 60);
    return 0;
}


int
mtime_parse(const char *s, size_t len, int64_t *sec, int32_t *nsec, int *beyond_ns)
{
    int y, mo, d, h, mi, se, off;
    size_t used;

    *nsec = 0;
    *beyond_ns = 0;
    if (len < 20 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't') || s[13] != ':' || s[16] != ':') {
        return -1;
    }
    if (digits(s, 4, &y) < 0 || digits(s + 5, 2, &mo) < 0 || digits(s + 8, 2, &d) < 0 || digits(s + 11, 2, &h) < 0
        || digits(s + 14, 2, &mi) < 0 || digits(s + 17, 2, &se) < 0) {
        return -1;
    }
    if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || se > 60) {
        return -1;
    }
    used = 19 + fraction(s + 19, len - 19, nsec, beyond_ns);
    if (zone(s + used, len - used, &off) < 0) {
        return -1;
    }
    *sec = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se - off;
    return 0;
}
